"""A person chats with the support agent: side b is the human."""

from orchestrator import Side, define_agent

agent = define_agent(
    type="ai_human",
    side_a=Side("support_agent", max_steps=8),
    title="Support chat",
)

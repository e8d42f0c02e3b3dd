"""Two AIs: the support agent (side a) helps a simulated customer (side b)."""

from orchestrator import Side, define_agent

agent = define_agent(
    type="dual_ai",
    side_a=Side("support_agent", max_steps=8),
    side_b=Side("customer", end_conversation_tool="end_chat"),
    max_session_turns=6,
    title="Support demo (two AIs)",
)

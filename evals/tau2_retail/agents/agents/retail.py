"""The tau2-bench retail domain as two AIs: the retail agent (side a) and a simulated customer (side b)."""

from orchestrator import Side, define_agent

agent = define_agent(
    type="dual_ai",
    side_a=Side("retail_agent", max_steps=10),
    side_b=Side("retail_user", end_conversation_tool="end_chat"),
    max_session_turns=10,
    title="tau2-bench retail (two AIs)",
)

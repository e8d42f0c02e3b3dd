"""The assistant and a simulated visitor, both AIs: `orchestrator run weather_sim`."""

from orchestrator import Side, define_agent

agent = define_agent(
    type="dual_ai",
    side_a=Side("assistant", max_steps=4),
    side_b=Side("visitor", end_conversation_tool="end_chat"),
    max_session_turns=6,
)

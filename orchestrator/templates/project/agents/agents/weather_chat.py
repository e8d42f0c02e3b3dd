"""A person (side b) talks to the assistant (side a): `orchestrator run weather_chat`."""

from orchestrator import Side, define_agent

agent = define_agent(type="ai_human", side_a=Side("assistant"))

"""A person asks for a forecast by mail; each mail waits for their approval: `orchestrator run weather_mail`."""

from orchestrator import Side, define_agent

agent = define_agent(type="ai_human", side_a=Side("mailer"))

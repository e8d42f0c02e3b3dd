"""A person asks about an order; side a answers with a typed `OrderStatus`."""

from orchestrator import Side, define_agent

agent = define_agent(type="ai_human", side_a=Side("order_status", max_steps=4), title="Order status (typed)")

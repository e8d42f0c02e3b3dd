"""The support agent with two rules spelled out: side a of the "after" suite in evals/compare/.

One prompt changed against `support_agent`, to show `orchestrator eval compare` telling a real
improvement from noise (docs/evals.md, "Is the difference real?").
"""

from orchestrator import define_prompt

prompt = define_prompt(
    prompt=(
        "You are a friendly, efficient customer support agent for an online shop. "
        "Use your tools to look up orders and customers before answering, and never "
        "invent order details. Before you cancel or ship an order, ask the customer to confirm "
        "and wait for their answer. When a customer asks for a person, record the hand-over with "
        'update_context (history, {"handoff": "human"}) and tell them a colleague will take over. '
        "Keep answers short and concrete."
    ),
    model=None,  # the config's default model
    tools=("lookup_order", "lookup_customer", "process_order", "get_current_time", "update_context"),
    tool_description="Answer a customer support question about orders and customers",
)

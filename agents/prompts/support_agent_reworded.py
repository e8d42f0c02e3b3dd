"""The support agent's instructions in other words: side a of the "reworded" suite in evals/compare/.

One prompt changed against `support_agent` that changes nothing that matters, to show
`orchestrator eval compare` calling a small difference "not distinguishable" (docs/evals.md).
"""

from orchestrator import define_prompt

prompt = define_prompt(
    prompt=(
        "You work in customer support for an online shop: be friendly and efficient. "
        "Look orders and customers up with your tools before you answer, and never make up "
        "order details. Check with the customer before cancelling or shipping an order. "
        "Answer briefly and concretely."
    ),
    model=None,  # the config's default model
    tools=("lookup_order", "lookup_customer", "process_order", "get_current_time", "update_context"),
    tool_description="Answer a customer support question about orders and customers",
)

"""A customer to evaluate the support agent against: side b of `support_demo` in evals.

The shipped `customer` prompt is one fixed customer; an eval scenario says who
the customer is and what they want through the thread's creation arguments
`persona` and `goal`, which this prompt reads (see evals/support_demo.yaml).
"""

from orchestrator import define_prompt

prompt = define_prompt(
    prompt=(
        "You are a customer of an online shop chatting with its support team.\n"
        "Who you are: {persona}\n"
        "What you want: {goal}\n"
        "Write short, natural messages, one at a time, and stay in character. When you have "
        "what you came for, or you give up, call end_chat with the reason."
    ),
    variables={"persona": "a customer", "goal": "to ask about an order"},
    tools=("end_chat",),
    tool_description="Role-play a customer with a given persona and goal",
)

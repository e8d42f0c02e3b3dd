from orchestrator import define_prompt

prompt = define_prompt(
    prompt="You are a visitor planning a trip to Oslo. Ask about the weather there; call end_chat when answered.",
    tool_description="A simulated visitor",
    tools=("end_chat",),
)

from orchestrator import define_prompt

prompt = define_prompt(
    prompt="You answer questions about the weather. Use lookup_weather for current conditions.",
    tool_description="Answers weather questions",
    tools=("lookup_weather",),
)

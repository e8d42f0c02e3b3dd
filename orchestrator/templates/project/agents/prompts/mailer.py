from orchestrator import define_prompt

prompt = define_prompt(
    prompt="You email weather forecasts. Use lookup_weather, then send_forecast (a person approves each mail).",
    tool_description="Emails weather forecasts",
    tools=("lookup_weather", "send_forecast"),
)

"""What the model answered when the example conversation was recorded (`orchestrator init` records it;
`pytest --record-mode=all` records it again from these turns)."""

from providers.scripted import ScriptedCall, ScriptedResponse

QUESTION = "What is the weather in Oslo?"
RECORDED = [
    ScriptedResponse(tool_calls=[ScriptedCall("lookup_weather", {"city": "Oslo"})]),
    ScriptedResponse(text="It is 21 C and sunny in Oslo."),
]

"""`serve --scripted SCRIPT.json`: a scripted model for demos, browser tests and load.

A cassette replays one conversation once; a server needs many at the same
time. So the script is stateless: each request is answered from what the
request itself shows.

    {
      "sides": [
        {"match": "customer support agent",          # substring of the system prompt
         "responses": [{"text": "Hello!"},
                       {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "A1002"}}]},
                       {"text": "It ships tomorrow."}]},
        {"match": "customer of an online shop",
         "responses": [{"text": "Where is A1002?"},
                       {"text": "Thanks!", "tool_calls": [{"name": "end_chat", "arguments": {"reason": "done"}}]}]}
      ],
      "default": {"text": "OK."}
    }

The first side whose `match` occurs in the request's system prompt answers
with `responses[n]`, n = the number of assistant messages already in the
request (that side's earlier steps in this thread); past the end of the list,
or when no side matches, `default` answers. Response fields are those of
`providers.scripted.ScriptedResponse` (text, tool_calls, chunk_size, usage).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

from ..validation import describe

DEMO_SCRIPT = Path(__file__).parent / "demo_script.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CallSpec(_Strict):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class ResponseSpec(_Strict):
    text: str = ""
    tool_calls: list[CallSpec] = Field(default_factory=list)
    chunk_size: int = Field(default=8, ge=1)
    usage: tuple[int, int] = (10, 5)

    def scripted(self) -> ScriptedResponse:
        calls = [ScriptedCall(c.name, c.arguments) for c in self.tool_calls]
        return ScriptedResponse(text=self.text, tool_calls=calls, chunk_size=self.chunk_size, usage=self.usage)


class SideScript(_Strict):
    match: str = Field(min_length=1)
    responses: list[ResponseSpec]


class Script(_Strict):
    sides: list[SideScript] = Field(default_factory=list)
    default: ResponseSpec = Field(default_factory=lambda: ResponseSpec(text="OK."))

    def answer(self, body: dict[str, Any]) -> ScriptedResponse:
        messages = body.get("messages") or []
        system = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")
        done = sum(1 for m in messages if m.get("role") == "assistant")
        for side in self.sides:
            if side.match in system:
                if done < len(side.responses):
                    return side.responses[done].scripted()
                break
        return self.default.scripted()


def load_script(path: str | Path) -> Script:
    """Read and check a script file; errors name the file and the field."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the script: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
    try:
        return Script.model_validate(raw)
    except ValidationError as exc:
        problems = describe(exc, root="(top)")
        raise ValueError(f"{path}: {problems}") from None


def scripted_model(path: str | Path) -> ScriptedModel:
    """A ScriptedModel answering every request from the script at `path`."""
    return ScriptedModel(load_script(path).answer)

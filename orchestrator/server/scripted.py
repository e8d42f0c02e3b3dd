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
The format is `providers.offline.Script`'s (YAML works too), which `type: offline`
models read in process.
"""

from __future__ import annotations

from pathlib import Path

from providers.offline import ResponseSpec, Script, load_script
from providers.scripted import ScriptedModel

__all__ = ["DEMO_SCRIPT", "ResponseSpec", "Script", "load_script", "scripted_model"]

DEMO_SCRIPT = Path(__file__).parent / "demo_script.json"


def scripted_model(path: str | Path) -> ScriptedModel:
    """A ScriptedModel answering every request from the script at `path`."""
    return ScriptedModel(load_script(path).answer)

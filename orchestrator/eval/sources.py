"""Where an eval run's model answers come from: live providers, a script, or a cassette.

The runner asks a source for each run's `RunModel` (the router answering its
requests, if any) and does the rest the same way for all three, so a new
source (e.g. a built-in offline model) only has to say how it answers.

A script lists, per scenario, what each side (and the judge) answers in turn,
in the one answer format of scripted models (`providers.offline.ResponseSpec`:
text, tool calls, usage, chunk size); it is how offline runs are written and how
the example cassettes were recorded. Which voice a request is for is read from its
system message: each side's rendered prompt, or a judge's instructions.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import respx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.eval.yamlfile import describe_errors, read_yaml
from providers.cassette import Replayer, load_cassette
from providers.config import SCRIPTED_BASE_URL
from providers.offline import ResponseSpec
from providers.scripted import ScriptedFault, ScriptedModel, ScriptedResponse

__all__ = [
    "LiveSource",
    "ModelSource",
    "ReplaySource",
    "RunModel",
    "ScenarioScript",
    "ScriptError",
    "ScriptedSource",
    "cassette_path",
    "load_script",
]

Voices = Mapping[str, str]
"""System message text -> who answers it: "a", "b" or "judge"."""


class ScriptError(ValueError):
    """The script file is invalid, or a run asked for more than it scripts."""


def cassette_path(directory: Path, scenario: str, index: int) -> Path:
    """Where run `index` (1-based) of a scenario is recorded."""
    return directory / scenario / f"run-{index}.json"


class RunModel:
    """One run's answers: `router` serves its requests (None: the network)."""

    def __init__(self, router: respx.Router | None = None, replayer: Replayer | None = None) -> None:
        self.router = router if router is not None else (replayer.router if replayer else None)
        self._replayer = replayer

    def problem(self) -> str | None:
        """Why the run did not follow its recording (replay only), else None."""
        if self._replayer is None:
            return None
        if self._replayer.mismatch is not None:
            return f"replay mismatch: {self._replayer.mismatch}"
        if self._replayer.remaining:
            return f"replay mismatch: {self._replayer.remaining} recorded request(s) were not made"
        return None


class ModelSource(Protocol):
    records: bool  # record each run to its cassette
    label: str

    def model_for(self, scenario: str, index: int, voices: Voices) -> RunModel: ...


class LiveSource:
    """The providers in the config, over the network (keys from the environment)."""

    records = True
    label = "live"

    def model_for(self, scenario: str, index: int, voices: Voices) -> RunModel:
        return RunModel()


class ReplaySource:
    """Each run answered from its cassette: offline, no key, the same conversation every time."""

    records = False
    label = "replay"

    def __init__(self, directory: Path, *, file: Path | None = None) -> None:
        self.directory = directory
        self.file = file  # replay this one cassette, whatever run is asked for

    def model_for(self, scenario: str, index: int, voices: Voices) -> RunModel:
        path = self.file or cassette_path(self.directory, scenario, index)
        if not path.is_file():
            raise ScriptError(
                f"no cassette {path} for run {index} of {scenario!r}: record it with --scripted or --live"
            )
        return RunModel(replayer=Replayer(load_cassette(path)))


# -- scripts ---------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


EVAL_CHUNK_SIZE = 64
"""Characters per streamed chunk of a scripted eval answer unless the answer says `chunk_size` (the example
cassettes were recorded so: fewer, larger events than a scripted model's default)."""


class ScenarioScript(_Strict):
    """What each voice answers in one run, in order: a side's steps, or the judge's verdicts."""

    a: list[ResponseSpec] = Field(default_factory=list)
    b: list[ResponseSpec] = Field(default_factory=list)
    judge: list[ResponseSpec] = Field(default_factory=list)


class _ScriptedScenario(ScenarioScript):
    variants: list[ScenarioScript] = Field(default_factory=list)  # run i uses variants[(i - 1) % n]

    def for_run(self, index: int) -> ScenarioScript:
        return self.variants[(index - 1) % len(self.variants)] if self.variants else self


class _ScriptFile(_Strict):
    shared: dict[str, Any] = Field(default_factory=dict)  # a home for YAML anchors, not read
    scenarios: dict[str, _ScriptedScenario]


SCRIPT_VALUES = 100_000
"""Values an eval script may hold with its aliases written out: anchors share answers between
scenarios (docs/evals.md); a bomb of them is refused before it expands."""

ScriptFunction = Callable[[str, int], ScenarioScript]
"""(scenario id, run index) -> what each voice answers in that run."""


def load_script(path: Path) -> ScriptFunction:
    data, marks = read_yaml(path, "eval script", ScriptError, aliases_up_to=SCRIPT_VALUES)
    try:
        script = _ScriptFile.model_validate(data)
    except ValidationError as exc:
        raise ScriptError("invalid eval script:\n  " + "\n  ".join(describe_errors(exc, marks, path))) from None

    def for_run(scenario: str, index: int) -> ScenarioScript:
        if scenario not in script.scenarios:
            raise ScriptError(f"{path}: no script for scenario {scenario!r}")
        return script.scenarios[scenario].for_run(index)

    return for_run


class ScriptedSource:
    """Scripted answers served as OpenAI-wire SSE at the `scripted` provider's URL.

    The run's models must be aliases of a `type: scripted` provider (like `demo`)."""

    records = True
    label = "scripted"

    def __init__(self, script: ScriptFunction, base_url: str = SCRIPTED_BASE_URL) -> None:
        self._script = script
        self._base_url = base_url

    def model_for(self, scenario: str, index: int, voices: Voices) -> RunModel:
        turns = self._script(scenario, index)
        queues = {"a": list(turns.a), "b": list(turns.b), "judge": list(turns.judge)}
        used = dict.fromkeys(queues, 0)

        def answer(body: dict[str, Any]) -> ScriptedResponse | ScriptedFault:
            system = _system_text(body)
            voice = voices.get(system)
            if voice is None:
                return ScriptedFault(400, message=f"scripted eval: no voice has the system message {system[:80]!r}")
            if used[voice] >= len(queues[voice]):
                return ScriptedFault(
                    400,
                    message=f"scripted eval: the script of {scenario!r} (run {index}) has "
                    f"{len(queues[voice])} answer(s) for {voice}; a further one was asked for",
                )
            used[voice] += 1
            return queues[voice][used[voice] - 1].scripted(chunk_size=EVAL_CHUNK_SIZE)

        router = respx.Router(assert_all_called=False, assert_all_mocked=True)
        ScriptedModel(answer).mount(router, self._base_url)
        return RunModel(router=router)


def _system_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    first = messages[0] if messages else {}
    content = first.get("content") if isinstance(first, dict) and first.get("role") == "system" else ""
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else json.dumps(content)

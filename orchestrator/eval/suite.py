"""The eval suite file: which agent, how to run it, and what each scenario must achieve.

A suite is YAML so the people who own an agent's behaviour can edit it without
Python. It is checked when loaded, and every problem names the file and line to
edit (the YAML is composed with node marks, as `providers.config` does).
Paths in a suite are relative to the suite file, so it runs from any directory.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from orchestrator.eval.yamlfile import Marks, describe_errors, read_yaml, where

__all__ = [
    "ApprovalCheck",
    "ApprovalRule",
    "Approvals",
    "Budget",
    "CallSpec",
    "Check",
    "Defaults",
    "EndReasonCheck",
    "InitialState",
    "JudgeCheck",
    "NoToolCallCheck",
    "PredicateCheck",
    "Scenario",
    "SimulatorCheck",
    "Suite",
    "SuiteError",
    "TextCheck",
    "ToolCallsCheck",
    "ValuesCheck",
    "NoApprovalCheck",
    "load_predicate",
    "load_suite",
]

SideName = Literal["a", "b"]


class SuiteError(ValueError):
    """The suite file is invalid; the message names file, line and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Strict):
    """Stop starting runs once this much was spent (runs already going finish)."""

    tokens: int | None = Field(default=None, ge=1)
    cost: float | None = Field(default=None, gt=0)  # USD, as the config's prices count it

    def exceeded(self, tokens: int, cost: float) -> bool:
        return (self.tokens is not None and tokens >= self.tokens) or (self.cost is not None and cost >= self.cost)


class ApprovalRule(_Strict):
    """One rule for the calls waiting for approval: the tool (and arguments that must be among the call's,
    a JSON subset, and/or a predicate `file.py:function(arguments) -> bool`), and the decision."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    predicate: str | None = None  # "file.py:function", the file relative to the suite
    decision: Literal["approve", "reject"]
    reason: str | None = Field(default=None, min_length=1)  # what the model reads when rejected

    @field_validator("predicate")
    @classmethod
    def _shape(cls, value: str | None) -> str | None:
        if value is not None:
            path, sep, name = value.rpartition(":")
            if not sep or not path.endswith(".py") or not name.isidentifier():
                raise ValueError(f"expected 'file.py:function', got {value!r}")
        return value


class Approvals(_Strict):
    """How a scenario decides the calls that wait for approval: the first rule matching a call decides,
    else `otherwise` (`leave`: nobody decides, the run ends `awaiting_approval`). `approve all` and
    `reject all` are the short forms."""

    rules: list[ApprovalRule] = Field(default_factory=list)
    otherwise: Literal["approve", "reject", "leave"] = "leave"
    reason: str = Field(default="rejected by the eval scenario", min_length=1)  # for `otherwise: reject`

    @model_validator(mode="before")
    @classmethod
    def _short(cls, data: Any) -> Any:
        if isinstance(data, str):
            words = {"approve all": "approve", "reject all": "reject"}
            if data.strip().lower() not in words:
                raise ValueError(f"expected 'approve all', 'reject all' or a mapping with rules, got {data!r}")
            return {"otherwise": words[data.strip().lower()]}
        return data


class Defaults(_Strict):
    models: dict[SideName, str] = Field(default_factory=dict)  # alias per side; unset: the prompt's own model
    prompts: dict[SideName, str] = Field(default_factory=dict)  # a side's prompt replaced (e.g. a simulated user)
    k: int = Field(default=1, ge=1, le=100)
    concurrency: int = Field(default=4, ge=1, le=64)
    max_turns: int | None = Field(default=None, ge=1)  # overrides the agent's max_session_turns
    budget: Budget | None = None
    judge_model: str | None = None  # alias for judge checks that name none
    # sent to providers that take one (OpenAI, Gemini...): run i of a scenario uses seed + i - 1; None: none sent
    seed: int | None = None
    approvals: Approvals | None = None  # for scenarios that say none


class CallSpec(_Strict):
    """A tool call to look for: the name, and arguments that must be among the call's (a JSON subset)."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    def expected(self) -> str | tuple[str, dict[str, Any]]:
        return self.name if self.arguments is None else (self.name, self.arguments)


class ValuesCheck(_Strict):
    kind: Literal["values"] = "values"
    values: dict[str, Any]
    subset: bool = False  # JSON subset instead of equal


class PredicateCheck(_Strict):
    kind: Literal["predicate"] = "predicate"
    predicate: str  # "file.py:function", the file relative to the suite
    keys: list[str] = Field(min_length=1)

    @field_validator("predicate")
    @classmethod
    def _shape(cls, value: str) -> str:
        path, sep, name = value.rpartition(":")
        if not sep or not path.endswith(".py") or not name.isidentifier():
            raise ValueError(f"expected 'file.py:function', got {value!r}")
        return value


class ToolCallsCheck(_Strict):
    kind: Literal["tool_calls"] = "tool_calls"
    tool_calls: list[CallSpec] = Field(min_length=1)
    ordered: bool = True


class NoToolCallCheck(_Strict):
    kind: Literal["no_tool_call"] = "no_tool_call"
    no_tool_call: CallSpec


class EndReasonCheck(_Strict):
    kind: Literal["end_reason"] = "end_reason"
    end_reason: str
    by: SideName | None = None


class TextCheck(_Strict):
    kind: Literal["text"] = "text"
    side: SideName | None = None  # whose text; None: both sides'
    contains: str | None = None
    regex: str | None = None
    absent: bool = False

    @model_validator(mode="after")
    def _one_of(self) -> TextCheck:
        if (self.contains is None) == (self.regex is None):
            raise ValueError("a text check needs exactly one of 'contains' or 'regex'")
        return self


class OutputCheck(_Strict):
    """Fields of the last typed answer (a prompt's `output=`): dotted paths to the values expected."""

    kind: Literal["output"] = "output"
    output: dict[str, Any] = Field(min_length=1)  # "status": "shipped", "items.0": "mug", "customer.name": ...
    subset: bool = False  # each expected value a JSON subset of the field's, instead of equal


class JudgeCheck(_Strict):
    kind: Literal["judge"] = "judge"
    judge: str = Field(min_length=1)  # the judge's instructions; the transcript is appended
    model: str | None = None  # alias from the config; None: defaults.judge_model


class SimulatorCheck(_Strict):
    """Did the simulated user (side b) keep to its instructions? A judge reads the transcript with them.

    `simulator: default` uses the default rubric (`grading.SIMULATOR_RUBRIC`); any other text is the
    rubric. A failed run is a simulator fault: reported apart and left out of the agent's rates."""

    kind: Literal["simulator"] = "simulator"
    simulator: str = Field(min_length=1)
    model: str | None = None  # alias from the config; None: defaults.judge_model


class ApprovalCheck(_Strict):
    """A call of this tool waited for approval during the run (whatever was decided)."""

    kind: Literal["approval_requested"] = "approval_requested"
    approval_requested: str = Field(min_length=1)  # the tool's name


class NoApprovalCheck(_Strict):
    kind: Literal["no_approval_requested"] = "no_approval_requested"
    no_approval_requested: str = Field(min_length=1)


Check = Annotated[
    ValuesCheck
    | PredicateCheck
    | ToolCallsCheck
    | NoToolCallCheck
    | EndReasonCheck
    | TextCheck
    | OutputCheck
    | JudgeCheck
    | SimulatorCheck
    | ApprovalCheck
    | NoApprovalCheck,
    Field(discriminator="kind"),
]
_KIND_KEYS = (
    "values",
    "predicate",
    "tool_calls",
    "no_tool_call",
    "end_reason",
    "text",
    "output",
    "judge",
    "simulator",
    "approval_requested",
    "no_approval_requested",
)


class InitialState(_Strict):
    values: dict[str, Any] = Field(default_factory=dict)  # KV values set before the run starts
    files: dict[str, str] = Field(default_factory=dict)  # file name in the thread -> path relative to the suite


class Scenario(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)  # creation arguments: persona, goal...
    state: InitialState = Field(default_factory=InitialState)
    k: int | None = Field(default=None, ge=1, le=100)
    approvals: Approvals | None = None  # None: defaults.approvals, else nobody decides
    checks: list[Check] = Field(min_length=1)

    @field_validator("checks", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        return [_with_kind(item) for item in value] if isinstance(value, list) else value


class Suite(_Strict):
    agent: str
    definitions: str = "agents"  # the definitions folder, relative to the suite
    config: list[str] = Field(default_factory=lambda: ["configs/default.yaml"])
    cassettes: str | None = None  # default: cassettes/evals/<suite name>
    defaults: Defaults = Field(default_factory=Defaults)
    scenarios: list[Scenario] = Field(min_length=1)
    # set by load_suite, not the file
    path: Path = Field(default=Path("suite.yaml"), exclude=True)
    root: Path = Field(default=Path("."), exclude=True)

    @field_validator("config", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _unique_ids(self) -> Suite:
        seen: set[str] = set()
        for scenario in self.scenarios:
            if scenario.id in seen:
                raise ValueError(f"scenario id {scenario.id!r} is used twice")
            seen.add(scenario.id)
        return self

    @property
    def name(self) -> str:
        return self.path.stem

    def resolve(self, relative: str) -> Path:
        path = Path(relative)
        return path if path.is_absolute() else Path(os.path.normpath(self.root / path))

    def cassette_dir(self) -> Path:
        return self.resolve(self.cassettes or f"cassettes/evals/{self.name}")

    def with_runs(self, k: int | None = None, concurrency: int | None = None) -> Suite:
        """This suite with `k` runs for every scenario and/or another concurrency (command-line overrides)."""
        update: dict[str, Any] = {}
        scenarios = self.scenarios
        if k is not None:
            update["k"] = k
            scenarios = [s.model_copy(update={"k": None}) for s in self.scenarios]
        if concurrency is not None:
            update["concurrency"] = concurrency
        return self.model_copy(update={"defaults": self.defaults.model_copy(update=update), "scenarios": scenarios})

    def k_for(self, scenario: Scenario) -> int:
        return scenario.k or self.defaults.k

    def approvals_for(self, scenario: Scenario) -> Approvals | None:
        return scenario.approvals or self.defaults.approvals

    def scenario(self, scenario_id: str) -> Scenario:
        for scenario in self.scenarios:
            if scenario.id == scenario_id:
                return scenario
        raise SuiteError(f"{self.path}: no scenario {scenario_id!r} (known: {', '.join(s.id for s in self.scenarios)})")


def _with_kind(item: Any) -> Any:
    """`{tool_calls: [...], ordered: false}` -> the same with `kind: tool_calls`: the key present names the check."""
    if not isinstance(item, dict) or "kind" in item:
        return item
    present = [key for key in _KIND_KEYS if key in item]
    if len(present) == 1:
        return {**item, "kind": present[0]} if present[0] != "text" else _text_check(item)
    # a tag no check has: pydantic's error then quotes it and lists the kinds there are
    if present:
        return {**item, "kind": f"one check per entry, found {', '.join(present)}"}
    return {**item, "kind": f"unknown check {', '.join(map(str, item))}"}


def _text_check(item: dict[str, Any]) -> dict[str, Any]:
    inner = item["text"]
    return {"kind": "text", **inner} if isinstance(inner, dict) else item


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite."""
    path = Path(path)
    data, marks = read_yaml(path, "eval suite", SuiteError)
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        lines = describe_errors(exc, marks, path, frozenset(_KIND_KEYS))
        raise SuiteError("invalid eval suite:\n  " + "\n  ".join(lines)) from None
    suite = suite.model_copy(update={"path": path, "root": path.parent})
    _check_references(suite, marks)
    return suite


def _check_references(suite: Suite, marks: Marks) -> None:
    """Files the suite names exist (a missing one is found now, not after an hour of runs)."""
    problems = []
    for i, scenario in enumerate(suite.scenarios):
        for name, relative in scenario.state.files.items():
            if not suite.resolve(relative).is_file():
                place = where(("scenarios", i, "state", "files", name), marks, suite.path)
                problems.append(f"{place}: scenarios.{i}.state.files.{name}: no file {relative!r}")
        for j, rule in enumerate(scenario.approvals.rules if scenario.approvals else []):
            problem = _predicate_problem(suite, rule.predicate) if rule.predicate else None
            if problem:
                place = where(("scenarios", i, "approvals", "rules", j, "predicate"), marks, suite.path)
                problems.append(f"{place}: scenarios.{i}.approvals.rules.{j}.predicate: {problem}")
        for j, check in enumerate(scenario.checks):
            if isinstance(check, PredicateCheck):
                problem = _predicate_problem(suite, check.predicate)
                if problem:
                    place = where(("scenarios", i, "checks", j, "predicate"), marks, suite.path)
                    problems.append(f"{place}: scenarios.{i}.checks.{j}.predicate: {problem}")
    if problems:
        raise SuiteError("invalid eval suite:\n  " + "\n  ".join(problems))


def _predicate_problem(suite: Suite, reference: str) -> str | None:
    try:
        load_predicate(suite, reference)
    except SuiteError as exc:
        return str(exc)
    return None


def load_predicate(suite: Suite, reference: str) -> Any:
    """The function a predicate check names, imported from its file (relative to the suite)."""
    relative, _, name = reference.rpartition(":")
    file = suite.resolve(relative)
    if not file.is_file():
        raise SuiteError(f"no file {relative!r} next to the suite")
    spec = importlib.util.spec_from_file_location(f"_eval_predicates_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise SuiteError(f"cannot import {relative!r}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise SuiteError(f"importing {relative!r} failed: {type(exc).__name__}: {exc}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise SuiteError(f"{relative!r} has no function {name!r}")
    return function

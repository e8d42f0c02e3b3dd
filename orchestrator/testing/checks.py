"""Checks on what a conversation did, not on its wording.

The tool calls it made (names, arguments, order), the thread's final KV values,
and how its execution ended. Each check returns a `CheckResult` with a reason a
person can act on; the pytest plugin turns a failed one into an assertion
error, and an eval scores with the same functions, so the two never disagree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from providers import model_json

if TYPE_CHECKING:
    from orchestrator.core.messages import SideName
    from orchestrator.engine.executor import ExecutionResult
    from orchestrator.runtime import Thread

__all__ = [
    "CallMade",
    "CheckResult",
    "ExpectedCall",
    "calls_made",
    "check_end_reason",
    "check_no_tool_call",
    "check_output",
    "check_predicate",
    "check_text",
    "check_tool_calls",
    "check_values",
    "texts_of",
    "is_subset",
    "output_of",
]

ExpectedCall = str | tuple[str, Mapping[str, Any]]
"""A tool name (any arguments), or a name with the arguments that must be among the call's (a JSON subset)."""


@dataclass(frozen=True, slots=True)
class CheckResult:
    name: str
    passed: bool
    reason: str

    def __bool__(self) -> bool:
        return self.passed


@dataclass(frozen=True, slots=True)
class CallMade:
    name: str
    arguments: Any  # the JSON the model sent, parsed (the raw text when it was not JSON)
    side: SideName | None  # None: a message injected for both sides
    depth: int

    def describe(self) -> str:
        return f"{self.name}({json.dumps(self.arguments, ensure_ascii=False, sort_keys=True)})"


async def calls_made(thread: Thread, *, include_nested: bool = False) -> list[CallMade]:
    """Every tool call the thread's models made, in order (queued and invoked calls included)."""
    messages = (await thread.get_messages(include_silent=True)).messages
    calls: list[CallMade] = []
    for message in messages:
        if message.role != "assistant" or (message.depth and not include_nested):
            continue
        for call in message.tool_calls or []:
            try:
                arguments = model_json.loads(call.arguments or "{}")
            except ValueError:  # invalid or too deep: the text as the model sent it
                arguments = call.arguments
            calls.append(CallMade(call.name, arguments, message.side, message.depth))
    return calls


def is_subset(expected: Any, actual: Any) -> bool:
    """`expected` is found in `actual`: objects by their keys (recursively), everything else equal."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(k in actual and is_subset(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(is_subset(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return isinstance(expected, bool) == isinstance(actual, bool) and bool(expected == actual)  # True is not 1


def _matches(expected: ExpectedCall, call: CallMade) -> bool:
    if isinstance(expected, str):
        return call.name == expected
    name, arguments = expected
    return call.name == name and is_subset(dict(arguments), call.arguments)


def _label(expected: ExpectedCall) -> str:
    if isinstance(expected, str):
        return expected
    return f"{expected[0]}({json.dumps(dict(expected[1]), ensure_ascii=False, sort_keys=True)})"


def check_tool_calls(
    calls: Sequence[CallMade], expected: Sequence[ExpectedCall], *, ordered: bool = True
) -> CheckResult:
    """Each expected call was made; with `ordered`, in this order (other calls may come between)."""
    made = ", ".join(c.describe() for c in calls) or "no tool calls"
    if ordered:
        position = 0
        for want in expected:
            while position < len(calls) and not _matches(want, calls[position]):
                position += 1
            if position == len(calls):
                return CheckResult("tool_calls", False, f"expected a call {_label(want)} in order; made: {made}")
            position += 1
        return CheckResult("tool_calls", True, f"made in order: {', '.join(_label(w) for w in expected)}")
    missing = [_label(w) for w in expected if not any(_matches(w, c) for c in calls)]
    if missing:
        return CheckResult("tool_calls", False, f"expected calls not made: {', '.join(missing)}; made: {made}")
    return CheckResult("tool_calls", True, f"made: {', '.join(_label(w) for w in expected)}")


def check_no_tool_call(calls: Sequence[CallMade], forbidden: ExpectedCall) -> CheckResult:
    """No call matching `forbidden` was made."""
    hits = [c.describe() for c in calls if _matches(forbidden, c)]
    if hits:
        return CheckResult("no_tool_call", False, f"{_label(forbidden)} must not be called; made: {', '.join(hits)}")
    return CheckResult("no_tool_call", True, f"{_label(forbidden)} was not called")


_NO_OUTPUT = object()


async def output_of(thread: Thread) -> Any:
    """The JSON form of the thread's last typed answer (a prompt's `output=`, `metadata["output"]`), or
    `_NO_OUTPUT` when its last answer is not one."""
    messages = (await thread.get_messages(order="desc", limit=50)).messages
    last = next((m for m in messages if m.role == "assistant" and m.depth == 0 and m.content), None)
    return last.metadata.get("output", _NO_OUTPUT) if last is not None else _NO_OUTPUT


def check_output(value: Any, expected: Mapping[str, Any], *, subset: bool = False) -> CheckResult:
    """Fields of a typed answer (dotted paths: `items.0.name`) equal the values expected (or, with `subset`,
    contain them as JSON subsets)."""
    if value is _NO_OUTPUT:
        return CheckResult("output", False, "the last answer is not a typed answer (its prompt has no output=)")
    wrong: list[str] = []
    for path, want in expected.items():
        found, got = _field(value, path)
        if not found:
            wrong.append(f"{path}: no such field in {json.dumps(value, ensure_ascii=False)[:200]}")
        elif not (is_subset(want, got) if subset else got == want):
            wrong.append(
                f"{path}: expected {json.dumps(want, ensure_ascii=False)}, got {json.dumps(got, ensure_ascii=False)}"
            )
    if wrong:
        return CheckResult("output", False, "; ".join(wrong))
    return CheckResult("output", True, f"output fields match: {', '.join(expected)}")


def _field(value: Any, path: str) -> tuple[bool, Any]:
    for part in path.split(".") if path else []:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


async def check_values(thread: Thread, expected: Mapping[str, Any], *, subset: bool = False) -> CheckResult:
    """The thread's KV store holds these values (equal, or with `subset` containing them)."""
    state = thread.state
    wrong: list[str] = []
    for key, want in expected.items():
        got = await state.get_value(key)
        ok = is_subset(want, got) if subset else got == want
        if not ok:
            wrong.append(
                f"{key}: expected {json.dumps(want, ensure_ascii=False)}, got {json.dumps(got, ensure_ascii=False)}"
            )
    if wrong:
        return CheckResult("values", False, "; ".join(wrong))
    return CheckResult("values", True, f"values match: {', '.join(expected)}")


def check_end_reason(result: ExecutionResult, reason: str, *, by: str | None = None) -> CheckResult:
    """The execution ended for `reason` (e.g. end_conversation), optionally by side `by`."""
    got = f"{result.reason} (stopped_by={result.stopped_by})"
    if result.reason != reason or (by is not None and result.stopped_by != by):
        want = reason + (f" by side {by}" if by else "")
        return CheckResult("end_reason", False, f"expected the execution to end with {want}; it ended with {got}")
    return CheckResult("end_reason", True, f"ended with {got}")


async def texts_of(thread: Thread, side: str | None = None) -> list[str]:
    """What the thread's models wrote (top level), in order; only side `side`'s when given."""
    messages = (await thread.get_messages(include_silent=True)).messages
    return [
        m.content
        for m in messages
        if m.role == "assistant" and not m.depth and m.content and (side is None or m.side == side)
    ]


def check_text(
    texts: Sequence[str], *, contains: str | None = None, regex: str | None = None, absent: bool = False
) -> CheckResult:
    """Some text contains `contains` / matches `regex` (case-insensitive); with `absent`, none does.

    For wording a check cannot read from state (a promise made, a word never said); prefer state checks."""
    if (contains is None) == (regex is None):
        raise ValueError("check_text: give exactly one of contains= or regex=")
    what = f"contains {contains!r}" if contains is not None else f"matches /{regex}/"
    pattern = re.compile(re.escape(contains) if contains is not None else str(regex), re.IGNORECASE)
    hits = [t for t in texts if pattern.search(t)]
    if absent:
        if hits:
            return CheckResult("text", False, f"no text may be one that {what}; found: {_clip(hits[0])}")
        return CheckResult("text", True, f"no text {what}")
    if not hits:
        last = _clip(texts[-1]) if texts else "no text at all"
        return CheckResult("text", False, f"expected a text that {what}; the last one: {last}")
    return CheckResult("text", True, f"a text {what}: {_clip(hits[0])}")


def _clip(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "...")


Predicate = Callable[[Mapping[str, Any]], "bool | str | tuple[bool, str]"]
"""Takes the KV values by key; returns pass/fail, a failure reason (str: failed), or (passed, reason)."""


async def check_predicate(thread: Thread, predicate: Predicate, keys: Sequence[str], *, name: str = "") -> CheckResult:
    """A function of the final KV values decides (for rules a subset cannot say, e.g. 'total below 50')."""
    label = name or getattr(predicate, "__name__", "predicate")
    values = {key: await thread.state.get_value(key) for key in keys}
    try:
        verdict = predicate(values)
    except Exception as exc:
        return CheckResult("predicate", False, f"{label} raised {type(exc).__name__}: {exc}")
    if isinstance(verdict, tuple):
        passed, reason = bool(verdict[0]), str(verdict[1])
    elif isinstance(verdict, str):
        passed, reason = False, verdict
    else:
        passed, reason = bool(verdict), ""
    shown = json.dumps(values, ensure_ascii=False, sort_keys=True, default=str)
    said = f"{label} {'held' if passed else 'failed'}{': ' + reason if reason else ''}"
    return CheckResult("predicate", passed, f"{said} (values {shown})")

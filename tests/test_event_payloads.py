"""The built-in events' payloads are typed where they are published: `EventBus.publisher` gives a
`Publish`, overloaded on the event's name, so mypy refuses a wrong payload (before, every publisher
passed `(str, dict)` and only `ORCHESTRATOR_CHECK_EVENTS=1` caught a wrong shape, at run time, in a
test that happened to produce it). The TypedDicts and the pydantic models clients validate with are
kept equal here, field by field."""

from __future__ import annotations

import re
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel

from orchestrator.core import event_payloads
from orchestrator.core.event_types import BUILTIN_EVENT_TYPES, event_model

ROOT = Path(__file__).resolve().parent.parent


def _published() -> dict[str, list[Any]]:
    """Event name -> the payload types `Publish` takes for it, read from its overloads."""
    out: dict[str, list[Any]] = {}
    for overload in typing.get_overloads(event_payloads.Publish.__call__):
        hints = typing.get_type_hints(overload, vars(event_payloads))
        data = hints["data"]
        members = list(get_args(data)) if isinstance(data, types.UnionType) else [data]
        for name in get_args(hints["type"]):
            out[name] = members
    return out


def _model_members(event_type: str) -> list[type[BaseModel]]:
    model = event_model(event_type)
    assert model is not None
    annotation = model.model_fields["data"].annotation
    members = get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]


def _fields(model: type[BaseModel]) -> tuple[set[str], set[str]]:
    """(required, optional) field names of a data model, as they are written on the wire."""
    required = {f.alias or name for name, f in model.model_fields.items() if f.is_required()}
    return required, {f.alias or name for name, f in model.model_fields.items()} - required


def _literal_values(annotation: Any) -> set[Any] | None:
    args = get_args(annotation)
    if get_origin(annotation) is Literal:
        return set(args)
    if args and all(get_origin(a) is Literal for a in args):
        return {v for a in args for v in get_args(a)}
    return None


def test_every_built_in_event_but_a_messages_has_a_typed_payload() -> None:
    """A message's event is numbered and stored with the message (`EventBus.commit`): nobody publishes one."""
    assert set(_published()) == BUILTIN_EVENT_TYPES - {"message_created", "tool_result"}


@pytest.mark.parametrize("event_type", sorted(BUILTIN_EVENT_TYPES - {"message_created", "tool_result"}))
def test_a_payloads_typed_dict_has_its_models_fields(event_type: str) -> None:
    payloads = _published()[event_type]
    models = _model_members(event_type)
    assert len(payloads) == len(models)
    for payload, model in zip(payloads, models, strict=True):
        assert (set(payload.__required_keys__), set(payload.__optional_keys__)) == _fields(model), payload
        hints = typing.get_type_hints(payload)
        for name, field in model.model_fields.items():  # a field limited to some values is limited alike
            assert _literal_values(hints[field.alias or name]) == _literal_values(field.annotation), (payload, name)


SNIPPET = """\
from orchestrator.core.event_payloads import Publish
from orchestrator.storage.events import EventBus


def publish_all(bus: EventBus, publish: Publish) -> None:
    publish("step_started", {"side": "a", "step": 1, "model": "demo"})
    publish("turn_ended", {"side": "b", "reason": "max_steps"})
    publish("execution_failed", {"code": "thread_busy", "error": "busy"})
    publish("step_started", {"side": "a", "step": "1", "model": "demo"})  # wrong: step
    publish("turn_ended", {"side": "a", "reason": "tired"})  # wrong: not a turn's end reason
    publish("step_started", {"side": "c", "step": 1, "model": "demo"})  # wrong: no such side
    publish("stream_restarted", {"side": "a", "attempt": 2})  # wrong: its reason is missing
    publish("turn_started", {"side": "a", "turn": 1, "extra": True})  # wrong: no such field
    publish("execution_failed", {"code": "oops", "error": "busy"})  # wrong: neither failure
    bus.publish("thr", "execution_stopped", {"flow_id": "f"})  # wrong: a built-in name skips the check
"""


def test_mypy_refuses_a_wrong_payload_where_it_is_published(tmp_path: Path) -> None:
    snippet = tmp_path / "publishers.py"
    snippet.write_text(SNIPPET)
    # The modules the types come from, checked with the snippet; what they import is skipped (Any), so
    # this takes two seconds, not the whole project's check. In a process of its own: mypy retunes and
    # freezes the collector of the process it runs in.
    modules = ["orchestrator/core/event_payloads.py", "orchestrator/core/messages.py", "providers/stream.py"]
    modules.append("orchestrator/storage/events.py")
    options = ["--strict", "--follow-imports=skip", "--cache-dir", str(tmp_path / "cache"), "--hide-error-context"]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", *options, str(snippet), *(str(ROOT / m) for m in modules)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    errors = {int(m.group(1)) for m in re.finditer(rf"^{re.escape(str(snippet))}:(\d+): error", done.stdout, re.M)}
    wrong = {n for n, line in enumerate(SNIPPET.splitlines(), start=1) if "# wrong" in line}
    assert done.returncode == 1 and not done.stderr, done.stderr
    assert errors == wrong, done.stdout

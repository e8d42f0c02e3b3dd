"""A provider that reuses a call id in a later step (per-response numbering, or a replayed model in a
fresh process) must not have its new call answered by the old call's result: before the fix, a crash
between storing such a step and its results resumed with nothing to run, and the model was shown the
earlier step's results (tests/test_crash_resume.py found it)."""

from __future__ import annotations

from orchestrator.core.messages import Message, ToolCall
from orchestrator.engine.answers import with_unique_call_ids


def _assistant(*ids: str) -> Message:
    return Message(
        thread_id="t", side="a", role="assistant", tool_calls=[ToolCall(id=i, name="note", arguments="{}") for i in ids]
    )


def test_a_reused_call_id_gets_the_steps_position_and_a_fresh_one_is_kept() -> None:
    history = [_assistant("call_0", "call_1"), Message(thread_id="t", side="a", role="tool", tool_call_id="call_0")]
    renamed = with_unique_call_ids(_assistant("call_0", "call_9"), history)
    assert [c.id for c in renamed.tool_calls or []] == ["call_0_2", "call_9"]
    fresh = _assistant("call_5")
    assert with_unique_call_ids(fresh, history) is fresh
    again = [with_unique_call_ids(_assistant("call_0"), history).tool_calls[0].id for _ in range(2)]  # type: ignore[index]
    assert again == ["call_0_2", "call_0_2"]  # the same on a resume: the request a replay checks is the same

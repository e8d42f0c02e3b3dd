"""`orchestrator run` asks the person when the thread waits: approve a tool call, answer a tool's question.

A thread whose execution ends `awaiting_*` rests with calls waiting (engine/waiting.py). A terminal
session is where the person is, so the session asks there: each waiting call's tool and arguments, then
`Approve? [y/n or a reason]` (`y` approves, `n` rejects with a default reason, any other text rejects
with that text as the reason the model reads); a question from `state.ask` asks for the answer text; a
deferred call asks for its result text. The decision that leaves no call open resumes the thread, and
the session asks again whenever the resumed execution waits again.

Where the answers come from: the terminal when stdin is one; otherwise stdin's next lines, one decision
a line (blank lines are skipped), so `printf 'refund A1\\ny\\n' | orchestrator run ...` sends a message
and approves. When stdin ends (or there is none: `< /dev/null`) nothing is decided: the calls stay
waiting, stored, and the session ends saying so. It never approves by itself, and never hangs.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Literal

from orchestrator.core.results import ToolResult
from orchestrator.core.waiting import Decision, WaitingCall, WaitingCallError
from orchestrator.engine.executor import ExecutionResult
from orchestrator.runtime import Thread

__all__ = ["DEFAULT_REJECTION", "Asker", "DecisionSource", "parse_approval", "settle_waiting"]

DEFAULT_REJECTION = "the person declined this call"
APPROVE_PROMPT = "Approve? [y/n or a reason] "

DecisionSource = Literal["tty", "stdin", "none"]
"""Where the session reads decisions: the terminal, stdin's lines, or nowhere (calls stay waiting)."""

ReadLine = Callable[[str], Awaitable[str | None]]
Say = Callable[[str], None]


def parse_approval(text: str) -> Decision:
    """A person's line for an approval: y/yes approves, n/no rejects with `DEFAULT_REJECTION`, other text
    rejects with that text (what the model reads). Blank lines are the caller's to skip."""
    word = text.strip()
    if word.lower() in {"y", "yes"}:
        return Decision(kind="approved")
    if word.lower() in {"n", "no"}:
        return Decision(kind="rejected", reason=DEFAULT_REJECTION)
    return Decision(kind="rejected", reason=word)


class Asker:
    """Reads one decision per waiting call from `read` (None: no more input), saying what it asks with `say`."""

    def __init__(self, read: ReadLine, say: Say) -> None:
        self._read = read
        self._say = say

    @classmethod
    def for_source(cls, source: DecisionSource) -> Asker | None:
        """The asker reading the terminal or stdin; None for `none` (the calls stay waiting)."""
        if source == "none":
            return None
        return cls(_tty_line if source == "tty" else _stdin_line, _print)

    async def decision(self, call: WaitingCall) -> Decision | None:
        """The decision for `call`, or None when the input ended before one was given."""
        self._say(_describe(call))
        prompt = {"approval": APPROVE_PROMPT, "answer": "Answer: ", "result": "Result: "}[call.kind]
        while True:
            line = await self._read(prompt)
            if line is None:
                return None
            if line.strip():
                break
        text = line.strip()
        if call.kind == "approval":
            return parse_approval(text)
        if call.kind == "answer":
            return Decision(kind="answer", answer=text)
        return Decision(kind="result", result=ToolResult.ok(text))


async def settle_waiting(thread: Thread, result: ExecutionResult, asker: Asker | None) -> ExecutionResult:
    """Ask for every waiting call of the thread until its execution ends not waiting; returns the last
    execution's result. With no asker, or once the input ends, the calls stay waiting (the thread rests)."""
    while result.reason.startswith("awaiting_"):
        calls = await thread.waiting_calls()
        if not calls:  # decided elsewhere (or expired): the thread resumed or is resuming
            resumed = await thread.resume()
            if resumed is None:
                return result
            result = await resumed
            continue
        resumed = None
        for call in calls:
            decision = await asker.decision(call) if asker is not None else None
            if decision is None:
                _say_still_waiting(thread, await thread.waiting_calls())
                return result
            try:
                resumed = await _apply(thread, call, decision) or resumed
            except WaitingCallError as exc:  # expired while asking, decided over HTTP, ...
                _print(f"  ! {exc}")
        if resumed is not None:
            result = await resumed
    return result


async def _apply(thread: Thread, call: WaitingCall, decision: Decision) -> asyncio.Task[ExecutionResult] | None:
    if decision.kind == "approved":
        return await thread.approve(call.call_id)
    if decision.kind == "rejected":
        return await thread.reject(call.call_id, decision.reason or DEFAULT_REJECTION)
    if decision.kind == "answer":
        return await thread.answer(call.call_id, decision.answer)
    assert decision.result is not None
    return await thread.submit_result(call.call_id, decision.result)


def _describe(call: WaitingCall) -> str:
    arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
    if call.kind == "approval":
        return f"\n⏸ side {call.side} wants to call {call.tool} {arguments} (call {call.call_id})"
    if call.kind == "answer":
        question = call.payload if isinstance(call.payload, str) else json.dumps(call.payload, ensure_ascii=False)
        return f"\n? {call.tool} asks: {question} (call {call.call_id})"
    return f"\n⏸ {call.tool} {arguments} waits for its result from outside (call {call.call_id})"


def _say_still_waiting(thread: Thread, calls: list[WaitingCall]) -> None:
    if not calls:
        return
    names = ", ".join(f"{c.tool} (call {c.call_id}, {c.kind})" for c in calls)
    _print(
        f"\nno decision given (input ended): thread {thread.id} waits for {names}; it stays stored, "
        f"decide over HTTP (POST /threads/{thread.id}/calls/CALL_ID/approve or /reject) or with thread.approve()"
    )


def _print(text: str) -> None:
    print(text, flush=True)


async def _tty_line(prompt: str) -> str | None:
    def read() -> str | None:
        try:
            return input(prompt)
        except EOFError:
            return None

    return await asyncio.to_thread(read)


async def _stdin_line(prompt: str) -> str | None:
    """The next line of stdin (the prompt is printed, then the line read, so a log reads like a terminal)."""

    def read() -> str | None:
        if sys.stdin is None:  # started with stdin closed
            return None
        line = sys.stdin.readline()
        if line:
            print(f"{prompt}{line.strip()}", flush=True)
        return line if line else None

    return await asyncio.to_thread(read)

"""Running an agent from the command line, live, recorded or replayed.

A recorded session is a cassette (see `providers.cassette`) whose metadata
holds what is needed to run it again (agent, arguments, the person's
messages) and what it produced (the transcript), so `orchestrator replay`
can re-run it and say whether messages and tool calls match. A session that
fails records nothing: the cassette is written beside its path and moved
there only when the session ends well, so a failed `--record` neither leaves
an empty cassette that `replay` refuses nor replaces a good one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.cli.asking import Asker, DecisionSource, settle_waiting
from orchestrator.core.messages import Message
from orchestrator.engine.executor import ExecutionResult
from orchestrator.runtime import Runtime, Thread
from providers import model_json

DEFAULT_CASSETTES = Path("cassettes")


@dataclass
class SessionOptions:
    agent: str
    path: str = "agents"
    config: Sequence[str] = ("configs/default.yaml",)
    model: str | None = None
    record: str | None = None
    replay: str | None = None
    messages: Sequence[str] = ()
    arguments: dict[str, Any] | None = None
    storage: str | None = None
    show: bool = True
    interactive: bool = False
    read_stdin: bool = False  # each line of stdin is a person's message (ai_human); EOF ends
    verbose: bool = False  # show tools' stored tracebacks
    import_in_background: bool = False  # the CLI imports LiteLLM (and freezes the heap) in a thread of its own
    decisions: DecisionSource = "stdin"  # where waiting calls are decided (cli/asking.py): tty, stdin or none


class NothingToSend(ValueError):
    """An ai_human run had no message: not on the command line, stdin, or a prompt."""


def transcript(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The comparable form of a conversation: who said what, which tools were called.

    A step's tools run concurrently, so a message a tool injects may be stored
    before or after another tool's result; answers are listed right after the
    call they answer (as requests show them), which makes the order stable."""
    out = []
    for m in _calls_then_answers(messages):
        entry: dict[str, Any] = {"side": m.side, "role": m.role, "depth": m.depth, "content": m.content}
        if m.tool_calls:
            entry["tool_calls"] = [{"name": c.name, "arguments": _loads(c.arguments)} for c in m.tool_calls]
        if m.role == "tool":
            entry["tool"] = m.name
            entry["status"] = m.tool_status
        out.append(entry)
    return out


def _calls_then_answers(messages: Sequence[Message]) -> list[Message]:
    answers = {m.tool_call_id: m for m in messages if m.role == "tool"}
    queued: dict[str, list[Message]] = {}
    for m in messages:
        if m.metadata.get("queued_by"):
            queued.setdefault(m.metadata["queued_by"], []).append(m)
    ordered: list[Message] = []

    def add_with_answers(message: Message) -> None:
        ordered.append(message)
        for call in message.tool_calls or []:
            if call.id in answers:
                ordered.append(answers.pop(call.id))
            for announce in queued.get(call.id, []):
                add_with_answers(announce)

    for m in messages:
        if m.role == "tool" or m.metadata.get("queued_by"):
            continue
        add_with_answers(m)
    ordered.extend(answers.values())  # answers whose call is not in the list
    return ordered


def _loads(text: str) -> Any:
    try:
        return model_json.loads(text or "{}")
    except ValueError:
        return text


def default_cassette(agent: str, folder: Path = DEFAULT_CASSETTES) -> Path:
    return folder / f"{agent}.json"


def build_runtime(options: SessionOptions) -> Runtime:
    config = list(options.config)
    runtime = Runtime.from_path(options.path, config=config, storage=options.storage, model=options.model or None)
    if options.import_in_background:  # don't wait for LiteLLM at open: the first request may not need it
        runtime.settings = runtime.settings.model_copy(update={"gc_freeze": False})
    return runtime


async def run_session(options: SessionOptions) -> tuple[ExecutionResult | None, list[Message]]:
    """Run one conversation; returns the last result and the thread's messages."""
    runtime = build_runtime(options)
    with _http_context(options, runtime) as recorder:
        async with runtime:
            thread = await runtime.create_thread(options.agent, options.arguments)
            result = await _drive(thread, options)
            messages = (await thread.get_messages(include_silent=True)).messages
            if recorder is not None:
                recorder.cassette.metadata.update(
                    agent=options.agent,
                    model=options.model,  # `replay` runs on it again (`--model test` answers in process)
                    arguments=options.arguments or {},
                    messages=list(options.messages),
                    transcript=transcript(messages),
                )
    return result, messages


async def _drive(thread: Thread, options: SessionOptions) -> ExecutionResult | None:
    """Run the conversation while a watcher shows its events; a closed output (`| head -1`) stops the
    execution and raises `OutputClosed` here once the thread rests."""
    from orchestrator.cli.console import ConsoleView

    view = ConsoleView(_side_names(thread), verbose=options.verbose) if options.show else None
    watcher = asyncio.create_task(_watch(thread, view)) if view else None
    result: ExecutionResult | None = None
    asker = Asker.for_source(options.decisions)
    try:
        if thread.agent.type == "dual_ai":
            result = await settle_waiting(thread, await thread.run(), asker)
        else:
            result = await _converse(thread, options, watcher, asker)
    finally:
        if watcher is not None:
            await asyncio.sleep(0)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher  # raises OutputClosed if the output closed
    if view is not None and result is not None:
        view.summary(result)
    return result


async def _converse(
    thread: Thread, options: SessionOptions, watcher: asyncio.Task[None] | None, asker: Asker | None
) -> ExecutionResult | None:
    """An ai_human session: the messages given, then stdin's lines or the prompt's, until EOF; after each,
    the waiting calls are asked for (a thread left waiting takes no more messages)."""
    result: ExecutionResult | None = None
    sent = 0

    def output_open() -> bool:
        return watcher is None or not watcher.done()

    for text in options.messages:
        if not output_open():
            return result
        result = await settle_waiting(thread, await thread.send(text), asker)
        sent += 1
        if result.reason.startswith("awaiting_"):
            return result
    while (options.interactive or options.read_stdin) and output_open():
        line = await asyncio.to_thread(_prompt if options.interactive else _stdin_line)
        if line is None or not output_open():
            break
        if line:
            result = await settle_waiting(thread, await thread.send(line), asker)
            sent += 1
            if result.reason.startswith("awaiting_"):
                return result
    if not sent and not options.interactive:
        raise NothingToSend(
            f"agent {thread.record.agent_id!r} is ai_human and waits for a person's message: "
            "pass -m TEXT (repeat for more turns) or pipe lines on stdin"
        )
    return result


def _stdin_line() -> str | None:
    """The next line of stdin, stripped ("" for a blank one); None at EOF."""
    line = sys.stdin.readline()
    return line.strip() if line else None


def _prompt() -> str | None:
    try:
        text = input("\nyou> ").strip()
    except EOFError:
        return None
    return text or None


async def _watch(thread: Thread, view: Any) -> None:
    from orchestrator.cli.errors import OutputClosed

    try:
        async for event in thread.events():
            view.show(event)
    except OutputClosed:
        thread.stop("output closed")  # its stream and tools are cancelled; the execution ends stored
        raise


def _side_names(thread: Thread) -> dict[str, str]:
    agent = thread.agent
    names = {"a": agent.side_a.prompt}
    names["b"] = agent.side_b.prompt if agent.side_b else "person"
    return names


@contextlib.contextmanager
def _http_context(options: SessionOptions, runtime: Runtime) -> Any:
    from providers.cassette import record, replay

    if options.replay:
        with replay(options.replay):
            yield None
    elif options.record:
        from orchestrator.runtime import config_secrets

        target = Path(options.record)
        partial = target.with_name(f".{target.name}.partial")
        recorder = record(partial, secrets=config_secrets(runtime.config))
        recorder.start()
        try:
            yield recorder
        except BaseException:
            recorder.stop()
            partial.unlink(missing_ok=True)  # nothing recorded; an earlier cassette at `target` stays
            raise
        recorder.stop()
        os.replace(partial, target)
    else:
        yield None


def compare(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> list[str]:
    """Differences between two transcripts, one line each (empty when they match)."""
    problems = []
    for i, (e, g) in enumerate(zip(expected, got, strict=False)):
        if e != g:
            problems.append(f"message {i + 1}: expected {json.dumps(e)[:200]}, got {json.dumps(g)[:200]}")
    if len(expected) != len(got):
        problems.append(f"expected {len(expected)} messages, got {len(got)}")
    return problems

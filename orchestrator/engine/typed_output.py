"""A step's typed answer: asked for in the request, read before it is stored, corrected, or failed clearly.

The executor calls four functions and keeps none of this in its loop: `add_to_toolset` (the request's
`response_format`, cached with the prompt's tools), `system_note` (the schema in words, prompted mode),
`read_answer` (before the answer is stored: its value, or the fields that failed, into its metadata) and
`settle` (after a step without tool calls: a correction sent back to the model, at most `output_retries`
times, then `OutputProblem`). A refusal, a cut or a filtered answer is never parsed: it is an
`OutputProblem` of its kind at once (a correction cannot make a refusal comply, and a cut answer is a prefix).

The stored answer keeps the JSON text as its `content` and the parsed value's JSON form as
`metadata["output"]`, so the page, evals and a resumed execution read the value without parsing again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.core.execution_result import OutputFailure
from orchestrator.core.messages import Message
from orchestrator.definitions.define import PromptDefinition
from orchestrator.definitions.output import OutputInvalid, OutputMode, OutputSpec, default_mode
from orchestrator.engine.toolset import Toolset
from providers.stream import ModelInfo

__all__ = ["OutputProblem", "add_to_toolset", "output_value", "read_answer", "settle", "system_note"]

OUTPUT_KEY = "output"  # metadata: the validated value's JSON form
ERRORS_KEY = "output_errors"  # metadata: the fields that failed
CORRECTION_KEY = "output_correction"  # metadata of the message that sent them back


class OutputProblem(Exception):
    """The step could not give the prompt's type; the executor ends the execution with `OutputFailed`."""

    def __init__(self, prompt: str, kind: OutputFailure, fields: list[str]) -> None:
        self.prompt = prompt
        self.kind = kind
        self.fields = fields
        what = {
            "invalid": "answered with a value that is not its output type",
            "refused": "refused to answer",
            "truncated": "was cut by the token limit (finish 'length') before its answer ended",
            "filtered": "was stopped by the provider's content filter",
        }[kind]
        detail = f": {'; '.join(fields)}" if fields else ""
        super().__init__(f"prompt {prompt!r} {what}{detail}")


def mode_of(prompt: PromptDefinition, info: ModelInfo) -> OutputMode:
    """The prompt's own mode, else its provider's default (docs/providers.md, "Typed answers")."""
    return prompt.output_mode or default_mode(info.provider_type)


def add_to_toolset(toolset: Toolset, prompt: PromptDefinition, info: ModelInfo) -> None:
    """The request parameters a typed answer needs (`response_format` in the model's dialect), once per toolset."""
    spec = prompt.output_spec
    if spec is not None:
        toolset.extra.update(spec.request(info.dialect, mode_of(prompt, info)).extra)


def system_note(prompt: PromptDefinition, info: ModelInfo) -> str:
    """What the system prompt adds in prompted mode (the schema in words); empty otherwise."""
    spec = prompt.output_spec
    if spec is None:
        return ""
    note = spec.request(info.dialect, mode_of(prompt, info)).system_note
    return f"\n\n{note}" if note else ""


def read_answer(prompt: PromptDefinition, info: ModelInfo, message: Message) -> None:
    """Before `message` is stored: a final answer's value (or the fields that failed) into its metadata.
    An answer with tool calls is a step on the way, and a refused or cut one is never parsed."""
    spec = prompt.output_spec
    if spec is None or message.tool_calls or _failure(message) is not None:
        return
    try:
        _, value = spec.parse(message.content or "", info.dialect)
    except OutputInvalid as exc:
        message.metadata[ERRORS_KEY] = exc.fields
        return
    message.metadata[OUTPUT_KEY] = value


def _failure(message: Message) -> OutputFailure | None:
    if message.refusal is not None or message.finish == "refusal":
        return "refused"
    if message.finish == "length":
        return "truncated"
    if message.finish == "content_filter":
        return "filtered"
    return None


async def settle(
    prompt: PromptDefinition,
    answer: Message,
    *,
    again: Callable[[], Awaitable[Message]],
    store: Callable[[Message], Awaitable[None]],
) -> Message:
    """The step's final answer once it is the prompt's type: each invalid one is answered with the fields
    that failed (`store`), and the model asked `again`, up to `prompt.output_retries` times."""
    name = prompt.name or "prompt"
    for attempt in range(prompt.output_retries + 1):
        failure = _failure(answer)
        if failure is not None:
            raise OutputProblem(name, failure, [])
        if OUTPUT_KEY in answer.metadata:
            return answer
        fields: list[str] = list(answer.metadata.get(ERRORS_KEY) or ["(answer): no value"])
        if attempt == prompt.output_retries:
            raise OutputProblem(name, "invalid", fields)
        await store(correction(answer, fields))
        answer = await again()
        if answer.tool_calls:  # the model went back to its tools: the turn goes on, its next answer is read
            return answer
    raise AssertionError("unreachable")  # pragma: no cover  # the loop returns or raises


def correction(answer: Message, fields: list[str]) -> Message:
    """The message that sends an invalid answer's failures back to the side that gave it (the other side
    never sees it: `views.side_view`)."""
    listed = "\n".join(f"- {f}" for f in fields)
    text = (
        "Your answer is not valid for the required output type. These fields failed:\n"
        f"{listed}\nAnswer again with the corrected JSON only."
    )
    parent = {"parent_call": answer.metadata["parent_call"]} if "parent_call" in answer.metadata else {}
    return Message(
        thread_id=answer.thread_id,
        side=answer.side,
        role="user",
        content=text,
        depth=answer.depth,
        flow_id=answer.flow_id,
        metadata={CORRECTION_KEY: True, **parent},
    )


def output_value(spec: OutputSpec | None, message: Message | None) -> tuple[bool, Any]:
    """(whether `message` carries a typed value, the value rebuilt from its stored JSON form)."""
    if spec is None or message is None or OUTPUT_KEY not in message.metadata:
        return False, None
    return True, spec.value_of(message.metadata[OUTPUT_KEY])

"""How an execution ended: `ExecutionResult`, and `ExecutionFailed` carrying one.

Shaped like a PydanticAI or OpenAI Agents SDK run result; the server returns it as JSON.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypeVar

from orchestrator.core.messages import Message, StoppedBy, Usage

# The type of `ExecutionResult.output`: the last AI text unless the caller names the prompt's output type
# (`thread.run(output=Model)`, `result.typed(Model)`), as PydanticAI's `AgentRunResult[OutputDataT]`.
OutputT = TypeVar("OutputT", default="str | None")
_T = TypeVar("_T")
OutputFailure = Literal["invalid", "refused", "truncated", "filtered"]


class ExecutionFailed(RuntimeError):
    """The model could not be reached (after retries and fallbacks). The thread
    is left consistent and can run again; `result` says how far it got."""

    def __init__(self, message: str, result: ExecutionResult) -> None:
        super().__init__(message)
        self.result = result


class OutputFailed(ExecutionFailed):
    """A prompt with a typed output (`define_prompt(output=...)`) did not give one: its answer stayed
    invalid after `output_retries` corrections (`fields` names what failed), or it refused or was cut
    (`kind`); a refused or cut answer is never parsed. The thread is consistent and can run again."""

    def __init__(
        self, message: str, result: ExecutionResult, *, prompt: str, kind: OutputFailure, fields: list[str]
    ) -> None:
        super().__init__(message, result)
        self.prompt = prompt
        self.kind = kind
        self.fields = fields


class ExecutionResult(BaseModel, Generic[OutputT]):
    """How an execution ended, shaped like a PydanticAI / Agents SDK run result
    (and the JSON the server returns for it). `output` is the last AI text, or for a prompt with a typed
    output the validated value (`ExecutionResult[Model]` from `thread.run(output=Model)` says so to mypy)."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    flow_id: str
    stopped_by: StoppedBy | None  # the side whose turn it was, or "caller" for a stop from outside
    reason: str
    step_count: int
    side_a_step_count: int
    side_b_step_count: int
    usage: Usage
    output: OutputT | None = None  # the last AI text of the execution, or its validated typed value
    finish: str | None = None  # how the last AI answer ended (providers.stream.FinishReason)
    truncated: bool = False  # the last AI answer was cut by the token limit (`output` is partial)
    refusal: str | None = None  # the last AI answer's refusal text, if it refused
    new_messages: list[Message] = Field(default_factory=list)

    @property
    def final_output(self) -> OutputT | None:  # OpenAI Agents SDK spelling
        return self.output

    def typed(self, output: type[_T]) -> ExecutionResult[_T]:
        """This result with `output` checked to be an `output` (a prompt's output type): a `ValidationError`
        when it is not (the last answer was text, or of another prompt)."""
        value = TypeAdapter(output).validate_python(self.output)
        cls = cast("type[ExecutionResult[_T]]", ExecutionResult[output])  # type: ignore[valid-type]
        return cls.model_construct(**{**dict(self), "output": value})


def any_result(**fields: Any) -> ExecutionResult[Any]:
    """A result whose output may be text or a typed value: what the executor builds."""
    return ExecutionResult[Any](**fields)

"""How an execution ended: `ExecutionResult`, and `ExecutionFailed` carrying one.

Shaped like a PydanticAI or OpenAI Agents SDK run result; the server returns it as JSON.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.core.messages import Message, StoppedBy, Usage


class ExecutionFailed(RuntimeError):
    """The model could not be reached (after retries and fallbacks). The thread
    is left consistent and can run again; `result` says how far it got."""

    def __init__(self, message: str, result: ExecutionResult) -> None:
        super().__init__(message)
        self.result = result


class ExecutionResult(BaseModel):
    """How an execution ended, shaped like a PydanticAI / Agents SDK run result
    (and the JSON the server returns for it)."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    flow_id: str
    stopped_by: StoppedBy | None  # the side whose turn it was, or "caller" for a stop from outside
    reason: str
    step_count: int
    side_a_step_count: int
    side_b_step_count: int
    usage: Usage
    output: str | None = None  # the last AI text of the execution
    finish: str | None = None  # how the last AI answer ended (providers.stream.FinishReason)
    truncated: bool = False  # the last AI answer was cut by the token limit (`output` is partial)
    refusal: str | None = None  # the last AI answer's refusal text, if it refused
    new_messages: list[Message] = Field(default_factory=list)

    @property
    def final_output(self) -> str | None:  # OpenAI Agents SDK spelling
        return self.output

"""What crosses the HTTP boundary: request bodies and response shapes.

These models are the OpenAPI document; keep them strict (unknown fields are
refused) so a typo in a client surfaces as a 422 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from orchestrator.core.messages import ExecutionSnapshot, Message, SideName, ThreadStatus, Usage
from orchestrator.engine.executor import ExecutionResult

ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
MAX_TEXT_CHARS = 100_000
MAX_JSON_DEPTH = 64  # nesting of a stored JSON value; far past any real one, well inside what serializers handle


def json_depth(value: Any) -> int:
    """How deeply `value` nests lists and objects (a scalar: 0); iterative, so any depth is safe to measure."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            depth += 1
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                break
            stack.extend((child, depth) for child in children)
    return deepest


def _shallow(value: Any) -> Any:
    if json_depth(value) > MAX_JSON_DEPTH:
        raise ValueError(f"nests deeper than {MAX_JSON_DEPTH} levels of lists and objects")
    return value


ShallowJson = Annotated[Any, AfterValidator(_shallow)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ----------------------------------------------------------------


class ErrorDetail(_Strict):
    code: str = Field(description="Stable machine-readable code, e.g. thread_not_found")
    message: str = Field(description="What went wrong, naming the field when one is at fault")
    field: str | None = Field(default=None, description="Where the problem is, e.g. body.agent or query.limit")


class ErrorBody(_Strict):
    error: ErrorDetail


# -- requests --------------------------------------------------------------


class CreateThread(_Strict):
    agent: str = Field(min_length=1, max_length=200, description="Agent name, see GET /agents")
    arguments: Annotated[dict[str, Any], AfterValidator(_shallow)] = Field(
        default_factory=dict, description="The agent's arguments"
    )
    user_id: str | None = Field(
        default=None, max_length=200, description="Owner; with auth on it must be the token's user or omitted"
    )


class SendMessage(_Strict):
    text: str = Field(
        min_length=1, max_length=MAX_TEXT_CHARS, pattern=r"\S", description="The person's message (ai_human agents)"
    )


class SetValue(_Strict):
    value: ShallowJson = Field(description=f"Any JSON value nesting at most {MAX_JSON_DEPTH} levels")


class SetEnv(_Strict):
    value: str = Field(max_length=10_000)
    type: Literal["text", "secret"] | None = Field(
        default=None, description="Omitted: keep the existing type, or secret for a new name"
    )


class ForceTurn(_Strict):
    side: SideName


class ForkBody(_Strict):
    at: int = Field(ge=1, le=2**62, strict=True, description="The message seq the fork's history ends at (included)")


class RewindBody(_Strict):
    to: int = Field(ge=1, le=2**62, strict=True, description="The message seq the thread continues from")


# -- responses -------------------------------------------------------------


class ThreadOut(_Strict):
    id: str
    agent: str
    agent_type: Literal["ai_human", "dual_ai"]
    user_id: str | None
    arguments: dict[str, Any]
    status: ThreadStatus
    running: bool
    execution: ExecutionSnapshot | None
    usage: Usage
    created_at: float
    updated_at: float
    forked_from: str | None = None
    forked_at: int | None = None


class Rewound(_Strict):
    thread_id: str
    to: int
    superseded: int = Field(description="How many later messages were marked superseded")


class ForkTree(_Strict):
    """The threads forked from one another that you may see: `root` and every fork below it, each
    with `forked_from` / `forked_at` (the tree's edges)."""

    root: str
    threads: list[ThreadOut]


class ThreadList(_Strict):
    threads: list[ThreadOut]


class Started(_Strict):
    thread_id: str
    status: Literal["started"] = "started"
    events: str = Field(description="The WebSocket path streaming this thread's events")


ExecutionResultOut = ExecutionResult  # the runtime's own result model is the response


class MessagesPage(_Strict):
    messages: list[Message]
    total: int
    has_more: bool


class ValueOut(_Strict):
    key: str
    value: Any = None


class EnvOut(_Strict):
    name: str
    type: Literal["text", "secret"]
    value: str | None = Field(default=None, description="Only for text values; a secret is never returned")


class EnvList(_Strict):
    env: list[EnvOut]


class Control(_Strict):
    thread_id: str
    running: bool
    detail: str


class SideOut(_Strict):
    prompt: str
    stop_on_response: bool
    stop_tool: str | None
    end_conversation_tool: str | None
    max_steps: int | None


class AgentOut(_Strict):
    name: str
    type: Literal["ai_human", "dual_ai"]
    title: str | None
    side_a: SideOut
    side_b: SideOut | None
    max_session_turns: int | None
    arguments: dict[str, Any] | None = Field(description="JSON schema of the agent's arguments, if it takes any")


class AgentList(_Strict):
    agents: list[AgentOut]


class ToolOut(_Strict):
    name: str
    kind: Literal["tool", "prompt", "agent"]
    description: str
    parameters: dict[str, Any] | None
    progress_argument: str | None = None


class ToolList(_Strict):
    tools: list[ToolOut]

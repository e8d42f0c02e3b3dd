"""The definitions API: `define_tool`, `define_prompt`, `define_agent`, `define_hook`.

Definitions are checked when they are made, so a mistake surfaces at import
(and in `orchestrator check`) rather than in the middle of a conversation.
The loader gives each definition its name from its file's stem.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.core.messages import EnvType
from orchestrator.core.results import AttachmentRef, ToolAttachment, ToolResult

if TYPE_CHECKING:
    from orchestrator.definitions.output import OutputSpec

__all__ = [
    "AgentDefinition",
    "AttachmentRef",
    "DefinitionError",
    "DefinitionErrors",
    "HookDefinition",
    "HOOK_NAMES",
    "MessageArgs",
    "PromptDefinition",
    "Side",
    "ToolAttachment",
    "ToolDefinition",
    "ToolResult",
    "VariableDefinition",
    "VariableScope",
    "define_agent",
    "define_hook",
    "define_prompt",
    "define_tool",
]


class DefinitionError(ValueError):
    """A definition is malformed. The message names the field and what was expected."""


class DefinitionErrors(DefinitionError):
    """Several problems of one definition, found together (each a `DefinitionError` in `errors`), so
    `orchestrator check` lists them all instead of the next one only once the first is fixed."""

    def __init__(self, errors: Sequence[DefinitionError]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


_D = TypeVar("_D", bound=BaseModel)


class _Problems:
    """What one define_* call found wrong: each check runs, then the definition is built (pydantic's
    own errors join, for fields no check reported), then everything found is raised at once."""

    def __init__(self, function: str) -> None:
        self.function = function
        self.errors: list[DefinitionError] = []
        self.fields: set[str] = set()

    @contextlib.contextmanager
    def check(self, field: str) -> Iterator[None]:
        try:
            yield
        except DefinitionError as exc:
            self.errors += exc.errors if isinstance(exc, DefinitionErrors) else [exc]
            self.fields.add(field)

    def build(self, cls: type[_D], **fields: Any) -> _D:
        try:
            built = cls(**fields)
        except ValidationError as exc:
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else ""
                if field not in self.fields:
                    where = ".".join(str(part) for part in error["loc"])
                    got = repr(error.get("input"))
                    got = got if len(got) <= 80 else got[:77] + "..."
                    self.errors.append(DefinitionError(f"{self.function}: {where!r}: {error['msg']}, got {got}"))
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise DefinitionErrors(self.errors)
        return built


ExecutionMode = Literal["local", "provider"]
ToolExecute = Callable[..., Awaitable["ToolResult | Mapping[str, Any]"]]
NeedsApproval = bool | Callable[[Any, Any], "bool | Awaitable[bool]"]
"""`needs_approval`: always, never, or a function of `(state, args)` deciding per call (refunds over 100)."""

HOOK_NAMES: tuple[str, ...] = (
    "prefilter_llm_history",
    "before_create_message",
    "after_create_message",
    "before_update_message",
    "after_update_message",
    "tool_call_started",
    "before_store_tool_result",
    "after_tool_call_success",
    "after_tool_call_failure",
)


VariableScope = Literal["operator", "thread"]
OutputMode = Literal["native", "tool", "prompted"]
OUTPUT_MODES: tuple[OutputMode, ...] = ("native", "tool", "prompted")


class VariableDefinition(BaseModel):
    """An env value a tool needs; checked before the tool runs.

    `scope` says who may set it. "operator" (the default) is the operator's alone: config
    `runtime.env`, the process environment, agent and prompt `env` defaults, `Runtime.set_user_env`;
    a thread never writes it (its tools' `set_env`, a person over HTTP) and a value stored on a
    thread is never read. "thread": a thread may set it, and its value wins over the operator's,
    which is then a default. Anything that decides where a secret goes (a URL, a path) stays
    "operator"; the default is the safe side because a tool's settings usually belong to its
    deployment, and one a person may choose is the exception the author names.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    type: EnvType = "secret"
    required: bool = True
    description: str | None = None
    scope: VariableScope = "operator"


class MessageArgs(BaseModel):
    """Default arguments of a prompt or agent called as a tool."""

    message: str = Field(description="What to ask or tell it, in plain language.")


class _Definition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str | None = None  # set by the loader from the file stem

    def named(self, name: str) -> Self:
        return self.model_copy(update={"name": name})


class ToolDefinition(_Definition):
    description: str
    execute: ToolExecute
    args: type[BaseModel] | None = None
    variables: tuple[VariableDefinition, ...] = ()
    uses: tuple[str, ...] = ()
    progress_argument: str | None = None
    annotations: dict[str, Any] | None = None
    execution_mode: ExecutionMode = "local"
    execution_provider: str | None = None
    timeout: float | None = Field(default=None, description="Seconds; None uses the runtime default.")
    needs_approval: NeedsApproval = False
    approval_timeout: float | None = Field(default=None, gt=0, description="Seconds; None: the runtime's")
    deferred: bool = False  # the result comes from outside (`thread.submit_result`); `execute` starts the job


class Side(BaseModel):
    """One side of an agent: its prompt and when its turn ends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str
    stop_on_response: bool = True
    stop_tool: str | None = None
    end_conversation_tool: str | None = None
    max_steps: int | None = Field(default=None, ge=1)

    def __init__(self, prompt: str | None = None, /, **data: Any) -> None:
        if prompt is not None:
            data["prompt"] = prompt
        super().__init__(**data)


class PromptDefinition(_Definition):
    prompt: str
    tool_description: str
    model: str | None = None  # a model alias from the config; None: the default model
    tools: tuple[str, ...] = ()
    variables: dict[str, str] = Field(default_factory=dict)  # defaults for {placeholders}
    env: dict[str, str] = Field(default_factory=dict)  # env defaults (text)
    args: type[BaseModel] | None = None  # arguments when called as a tool
    max_steps: int = Field(default=10, ge=1)  # bound on the nested loop as a tool
    # A typed answer (definitions/output.py): the type as given, its spec, how to ask, corrections allowed
    output: Any = None  # any type a pydantic TypeAdapter takes
    output_mode: OutputMode | None = None  # None: the provider's default (output.default_mode)
    output_retries: int = Field(default=1, ge=0)

    @functools.cached_property
    def output_spec(self) -> OutputSpec | None:
        """The output type's schema and reader, made once (a TypeAdapter costs a millisecond)."""
        from orchestrator.definitions.output import OutputSpec

        return OutputSpec.of(self.output) if self.output is not None else None

    needs_approval: NeedsApproval = False  # when called as a tool
    approval_timeout: float | None = Field(default=None, gt=0)


class AgentDefinition(_Definition):
    type: Literal["ai_human", "dual_ai"]
    side_a: Side
    side_b: Side | None = None
    max_session_turns: int | None = Field(default=None, ge=1)
    expose_as_tool: bool = False
    tool_description: str | None = None
    args: builtins.type[BaseModel] | None = None  # creation arguments when called as a tool ("type" is a field here)
    env: dict[str, str] = Field(default_factory=dict)
    title: str | None = None
    approver: str | None = None  # dual_ai: the prompt that decides the calls waiting for approval (simulated person)


class HookDefinition(_Definition):
    hook: str
    fn: Callable[..., Any]


# --------------------------------------------------------------------------
# define_* functions
# --------------------------------------------------------------------------


def define_tool(
    fn: ToolExecute | None = None,
    /,
    *,
    description: str | None = None,
    execute: ToolExecute | None = None,
    args: type[BaseModel] | None = None,
    variables: tuple[VariableDefinition, ...] | list[VariableDefinition] = (),
    uses: tuple[str, ...] | list[str] = (),
    progress_argument: str | None = None,
    annotations: dict[str, Any] | None = None,
    execution_mode: ExecutionMode = "local",
    execution_provider: str | None = None,
    timeout: float | None = None,
    needs_approval: NeedsApproval = False,
    approval_timeout: float | None = None,
    deferred: bool = False,
) -> ToolDefinition:
    """Define a tool: `execute(state, args)` with an `args` model, `execute(state)` without.

    Or from a plain async function, `define_tool(fn)` or `@define_tool`: its
    signature and docstring give the arguments and the description (see
    `function_tool`); `description=` overrides the docstring's.

    `needs_approval` (True, or `(state, args) -> bool`, sync or async) makes a call wait for
    `thread.approve` / `thread.reject` before it runs; `approval_timeout` (seconds) rejects it when
    nobody decided in time. `deferred=True`: the result comes later from outside
    (`thread.submit_result`); `execute` runs first (to start the job) and what it returns is not the
    result. A tool may also return `ToolResult.deferred()` to decide so per call (docs/guide.md).
    """
    if fn is not None:
        if execute is not None or args is not None:
            raise DefinitionError("define_tool: pass a function, or execute= (with args=), not both")
        description, execute, args = _from_function(fn, description)
    elif execute is None:
        raise DefinitionError(
            "define_tool: 'execute' is required, or pass a function: @define_tool, or "
            "tool = define_tool(fn, timeout=...) to give options"
        )
    problems = _Problems("define_tool")
    with problems.check("description"):
        if not isinstance(description, str) or not description.strip():
            raise DefinitionError("define_tool: 'description' must be a non-empty string")
    _check_tool(problems, execute, args, uses, progress_argument, execution_mode, execution_provider)
    return problems.build(
        ToolDefinition,
        description=description,
        execute=execute,
        args=args,
        variables=tuple(variables) if isinstance(variables, (list, tuple)) else variables,
        uses=tuple(uses) if isinstance(uses, (list, tuple)) else uses,
        progress_argument=progress_argument,
        annotations=annotations,
        execution_mode=execution_mode,
        execution_provider=execution_provider,
        timeout=timeout,
        needs_approval=needs_approval,
        approval_timeout=approval_timeout,
        deferred=deferred,
    )


def _from_function(fn: ToolExecute, description: str | None) -> tuple[str | None, ToolExecute, type[BaseModel] | None]:
    """The description, `execute` and args model a plain function gives (`function_tool`)."""
    from orchestrator.definitions.function_tool import from_function

    built = from_function(fn)
    description = description or built.description
    if not description:
        name = getattr(fn, "__name__", "fn")
        raise DefinitionError(f"define_tool({name}): give the function a docstring or pass description=")
    return description, built.execute, built.args


def _check_tool(
    problems: _Problems,
    execute: ToolExecute,
    args: type[BaseModel] | None,
    uses: tuple[str, ...] | list[str],
    progress_argument: str | None,
    execution_mode: ExecutionMode,
    execution_provider: str | None,
) -> None:
    """`define_tool`'s other options, checked at definition time, naming the option (every one is checked)."""
    with problems.check("args"):
        if args is not None:
            if not (isinstance(args, type) and issubclass(args, BaseModel)):
                raise DefinitionError(f"define_tool: 'args' must be a pydantic BaseModel subclass, got {args!r}")
            from orchestrator.definitions.arg_types import check_args_model

            check_args_model(args)  # raises SchemaError (a DefinitionError) naming the field path
    with problems.check("execution_mode"):
        if execution_mode not in ("local", "provider"):
            raise DefinitionError(
                f"define_tool: 'execution_mode' must be 'local' or 'provider', got {execution_mode!r}"
            )
        if execution_mode == "provider" and not execution_provider:
            raise DefinitionError(
                "define_tool: execution_mode='provider' requires 'execution_provider' (e.g. 'anthropic')"
            )
    if execution_mode == "local":
        with problems.check("execute"):
            _check_execute(execute, with_args=args is not None)
    if "args" not in problems.fields:  # a broken args model has no fields to name
        with problems.check("progress_argument"):
            _check_progress_argument(progress_argument, args)
    with problems.check("uses"):
        if isinstance(uses, str) or not all(isinstance(u, str) for u in uses):  # type: ignore[unreachable]  # untyped callers
            raise DefinitionError("define_tool: 'uses' must be a tuple of tool names")


def define_prompt(
    *,
    prompt: str,
    tool_description: str,
    model: str | None = None,
    tools: tuple[str, ...] | list[str] = (),
    variables: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    args: type[BaseModel] | None = None,
    max_steps: int = 10,
    output: object = None,
    output_mode: OutputMode | None = None,
    output_retries: int = 1,
    needs_approval: NeedsApproval = False,
    approval_timeout: float | None = None,
) -> PromptDefinition:
    """Define a prompt: a system prompt, a model alias and the tools it may call.

    Every prompt is callable as a tool, so `tool_description` is required. With `output` (a pydantic
    model, or any type a `TypeAdapter` takes) its final answer is that type, validated, and sent back
    to the model up to `output_retries` times when it is not; `output_mode` is how it is asked for.
    """
    problems = _Problems("define_prompt")
    with problems.check("tool_description"):
        if not isinstance(tool_description, str) or not tool_description.strip():
            raise DefinitionError("define_prompt: 'tool_description' is required (every prompt is callable as a tool)")
    with problems.check("tools"):
        if isinstance(tools, str) or not all(isinstance(t, str) for t in tools):  # type: ignore[unreachable]  # untyped callers
            raise DefinitionError(f"define_prompt: 'tools' must be a tuple of tool names, got {tools!r}")
    with problems.check("args"):
        if args is not None:
            from orchestrator.definitions.arg_types import check_args_model

            check_args_model(args)
    with problems.check("output"):
        if output is not None:
            from orchestrator.definitions.output import check_output

            check_output(output)
    with problems.check("output_mode"):
        if output_mode is not None and output_mode not in OUTPUT_MODES:
            raise DefinitionError(f"define_prompt: 'output_mode' must be one of {OUTPUT_MODES}, got {output_mode!r}")
    return problems.build(
        PromptDefinition,
        prompt=prompt,
        tool_description=tool_description,
        model=model,
        tools=tuple(tools) if "tools" not in problems.fields else (),
        variables=_mapping(variables),
        env=_mapping(env),
        args=args or MessageArgs,
        max_steps=max_steps,
        output=output if "output" not in problems.fields else None,
        output_mode=output_mode if "output_mode" not in problems.fields else None,
        output_retries=output_retries,
        needs_approval=needs_approval,
        approval_timeout=approval_timeout,
    )


def _mapping(value: Mapping[str, str] | None) -> Any:
    """A copy of a mapping option; anything else as given, for pydantic to name what is wrong."""
    return dict(value) if isinstance(value, Mapping) else value if value is not None else {}


def define_agent(
    *,
    type: Literal["ai_human", "dual_ai"],
    side_a: Side,
    side_b: Side | None = None,
    max_session_turns: int | None = None,
    expose_as_tool: bool = False,
    tool_description: str | None = None,
    args: type[BaseModel] | None = None,
    env: Mapping[str, str] | None = None,
    title: str | None = None,
    approver: str | None = None,
) -> AgentDefinition:
    """Define an agent: `ai_human` (side b is a person) or `dual_ai` (both AI). A dual_ai agent's
    `approver` names a prompt that decides its calls waiting for approval, as a simulated person would
    (engine/approver.py), so approval flows run and evaluate with no one at hand."""
    problems = _Problems("define_agent")
    with problems.check("approver"):
        if approver is not None and (not isinstance(approver, str) or not approver.strip()):
            raise DefinitionError(f"define_agent: 'approver' must be a prompt's name, got {approver!r}")
        if approver is not None and type != "dual_ai":
            raise DefinitionError(
                "define_agent: 'approver' is for dual_ai agents (in an ai_human one the person decides)"
            )
    with problems.check("type"):
        if type not in ("ai_human", "dual_ai"):
            raise DefinitionError(f"define_agent: 'type' must be 'ai_human' or 'dual_ai', got {type!r}")
    with problems.check("side_b"):
        if type == "dual_ai" and side_b is None:
            raise DefinitionError("define_agent: a 'dual_ai' agent needs 'side_b' (a Side with a prompt)")
    with problems.check("tool_description"):
        if expose_as_tool and not tool_description:
            raise DefinitionError("define_agent: expose_as_tool=True requires 'tool_description'")
    with problems.check("args"):
        if args is not None:
            from orchestrator.definitions.arg_types import check_args_model

            check_args_model(args)
    return problems.build(
        AgentDefinition,
        type=type,
        side_a=side_a,
        side_b=side_b,
        max_session_turns=max_session_turns,
        expose_as_tool=expose_as_tool,
        tool_description=tool_description,
        args=args or (MessageArgs if expose_as_tool else None),
        env=_mapping(env),
        title=title,
        approver=approver,
    )


def define_hook(name: str, fn: Callable[..., Any]) -> HookDefinition:
    """Define a hook. `name` is one of `HOOK_NAMES`; `fn` may be sync or async."""
    if name not in HOOK_NAMES:
        raise DefinitionError(f"define_hook: unknown hook name {name!r}; expected one of {', '.join(HOOK_NAMES)}")
    if not callable(fn):
        raise DefinitionError(f"define_hook: 'fn' must be callable, got {fn!r}")
    return HookDefinition(name=name, hook=name, fn=fn)


# --------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------


def _check_execute(execute: Any, *, with_args: bool) -> None:
    if not callable(execute):
        raise DefinitionError(f"define_tool: 'execute' must be an async function, got {execute!r}")
    if not inspect.iscoroutinefunction(execute) and not inspect.iscoroutinefunction(type(execute).__call__):
        raise DefinitionError(
            "define_tool: 'execute' must be an async function (async def), "
            f"got {getattr(execute, '__name__', execute)!r}"
        )
    try:
        params = [
            p
            for p in inspect.signature(execute).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):  # builtins without signatures: trust them
        return
    want = 2 if with_args else 1
    required = [p for p in params if p.default is inspect.Parameter.empty]
    if len(required) > want or len(params) < want:
        shape = "(state, args)" if with_args else "(state)"
        raise DefinitionError(
            f"define_tool: 'execute' must take {shape}"
            f"{' because args is set' if with_args else ' because no args model is set'}; "
            f"it takes ({', '.join(p.name for p in params)})"
        )


def _check_progress_argument(name: str | None, args: type[BaseModel] | None) -> None:
    if name is None:
        return
    if args is None or name not in args.model_fields:
        known = ", ".join(args.model_fields) if args is not None else "none: the tool has no args"
        raise DefinitionError(
            f"define_tool: progress_argument {name!r} must name a top-level argument (known: {known})"
        )
    from orchestrator.definitions.arg_types import is_plain_string_field

    if not is_plain_string_field(args.model_fields[name]):
        raise DefinitionError(
            f"define_tool: progress_argument {name!r} must be a string argument, "
            f"got {args.model_fields[name].annotation!r}"
        )

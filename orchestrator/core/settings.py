"""Runtime settings: the limits and defaults the executor enforces.

Read from the `runtime:` section of the config YAML; every field has a safe
default so the section is optional.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from providers.config import register_section


class SandboxSettings(BaseModel):
    """`runtime.sandbox`: what `run_code` may hold at once in this process (each run reserves 128 MiB)."""

    model_config = ConfigDict(extra="forbid")

    max_python_runs: int = Field(default=2, ge=1, le=64, description="Python runs at once (a Monty worker each).")
    max_javascript_runs: int = Field(default=4, ge=1, le=64, description="JS/TS runs at once (a thread each).")
    memory_budget_bytes: int = Field(default=512 * 2**20, ge=128 * 2**20, description="All runs together.")
    python_jail: Literal["bwrap", "none"] = Field(
        default="bwrap",
        description=(
            "Defence in depth under the Python engine: each worker in a bubblewrap jail (Linux with user "
            "namespaces); `none` runs on Monty's own isolation alone."
        ),
    )


class RuntimeSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="Run every prompt on this model alias (the CLI's --model).")
    redis: str | None = Field(
        default=None,
        description="Redis URL for cross-process event fan-out (servers + workers); None: in-process only.",
    )
    storage: str = Field(
        default="sqlite:///orchestrator.db", description="Storage URL (sqlite:///path or postgresql://...)"
    )
    tool_timeout: float = Field(
        default=60.0, gt=0, description="Seconds a tool may run unless it sets its own timeout."
    )
    approval_timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds a call waits for approval unless its tool sets its own; then rejected. None: never.",
    )
    max_tool_result_chars: int = Field(
        default=100_000, ge=1_000, description="Longer results are truncated with a note to the model."
    )
    max_attachment_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    max_queued_tools: int = Field(
        default=16, ge=0, description="Queued tools per step; more are refused with an error result."
    )
    max_invoke_depth: int = Field(
        default=8, ge=1, description="Nesting bound for invoke_tool and prompts/agents as tools."
    )
    default_max_steps: int = Field(
        default=25, ge=1, description="A side's steps per turn when its Side sets no max_steps."
    )
    default_max_session_turns: int = Field(
        default=50, ge=1, description="Bound for agents that set no max_session_turns."
    )
    lease_ttl: float = Field(
        default=30.0, gt=0, description="Seconds a thread's execution lease lives without renewal."
    )
    gc_freeze: bool = Field(
        default=True,
        description="Import LiteLLM at open and gc.freeze() the heap once per process (no GC pauses mid-conversation).",
    )
    gc_defer_full: bool = Field(
        default=True,
        description="While executions run, full GCs wait for 10x CPython's middle-generation collections.",
    )
    trace_content: bool = Field(
        default=False, description="Record model input and output (redacted) on OpenTelemetry spans."
    )
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings, description="Process-wide run_code budget.")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Runtime-instance env values (text); secrets belong in the process environment.",
    )


register_section("runtime", RuntimeSettings)  # its problems are reported with the config's others, with lines

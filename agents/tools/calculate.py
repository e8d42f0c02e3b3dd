"""Run a short program the model writes: arithmetic, statistics, data transforms.

The code runs in the thread's sandbox (`state.run_code`): no files, network or
processes, 128 MiB, a few seconds. The value comes back as JSON text, the
guest's error (with its stack) as an error result, and printed output is
appended so the model can debug its own program.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from orchestrator import ToolResult, define_tool

if TYPE_CHECKING:
    from orchestrator import ThreadState

TIMEOUT_SECONDS = 5.0
RESULT_LIMIT = 16 * 1024  # characters of JSON handed back to the model


class Args(BaseModel):
    code: str = Field(
        description=(
            "The program. JavaScript: an ES module whose `export default` is the answer or a "
            "function returning it, e.g. `export default [1,2,3].reduce((a, b) => a + b)`. "
            "Python: the value of the last expression is the answer, e.g. "
            "`sorted([3, 1, 2])[1]`; a subset of Python (no generators or class inheritance; modules: math, "
            "json, re, datetime, decimal, collections, itertools, functools, random). The answer must be "
            "JSON-serialisable."
        )
    )
    language: Literal["javascript", "python"] = Field(default="javascript", description="Language of `code`")
    data_json: str | None = Field(
        default=None,
        description="Optional JSON object; each key becomes a global variable of the program",
    )


async def execute(state: ThreadState, args: Args) -> ToolResult:
    globals_: dict[str, Any] | None = None
    if args.data_json:
        try:
            globals_ = json.loads(args.data_json)
        except ValueError as exc:
            return ToolResult(status="error", error=f"data_json is not valid JSON: {exc}")
        if not isinstance(globals_, dict):
            return ToolResult(status="error", error="data_json must be a JSON object")
    try:
        execution = state.run_code(args.code, language=args.language, globals=globals_, timeout=TIMEOUT_SECONDS)
    except ValueError as exc:
        return ToolResult(status="error", error=str(exc))
    result = await execution
    console = f"\n--- output ---\n{result.console}" if result.console else ""
    if result.status != "ok":
        return ToolResult(status="error", error=f"{result.status}: {result.error}{console}", stack=result.stack)
    text = json.dumps(result.value, ensure_ascii=False)
    if len(text) > RESULT_LIMIT:
        text = text[:RESULT_LIMIT] + f"... (truncated, {len(text)} characters in all)"
    return ToolResult(status="success", result=text + console)


tool = define_tool(
    description=(
        "Compute with code instead of by hand: arithmetic, dates, statistics, parsing and "
        "transforming data. Runs JavaScript or Python in a sandbox without files or network "
        "and returns the program's value as JSON."
    ),
    args=Args,
    execute=execute,
    timeout=TIMEOUT_SECONDS + 5,
)

"""Showing a thread live in a terminal: each side's text as it streams, tool
calls with their progress value, results, and a summary at the end.

When the reader of the output goes away (`orchestrator run ... | head -1`), the
view raises `OutputClosed` instead of rich's `SystemExit(1)` (which, raised in
an asyncio task, printed a 96-line dump and could hang the exit); the session
stops the execution, and the command group ends the process with
`cli.errors.exit_output_closed` (status 141).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.cli.errors import OutputClosed
from orchestrator.core.messages import Event

if TYPE_CHECKING:
    from orchestrator.engine.executor import ExecutionResult


def _console() -> Any:
    """A rich Console whose closed output raises `OutputClosed` (rich's own raises SystemExit(1))."""
    from rich.console import Console

    class _ClosableConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # nothing more is written, even from a `finally`
            raise OutputClosed("the output was closed")

    return _ClosableConsole(highlight=False)


class ConsoleView:
    """Renders events as they arrive. Plain text when the output is not a TTY."""

    def __init__(self, side_names: dict[str, str], *, console: Any = None, verbose: bool = False) -> None:
        self.console = console or _console()
        self.side_names = side_names
        self.verbose = verbose  # show a failed tool's stored (redacted) traceback
        self._speaking: tuple[str, int] | None = None
        self._turn_end: tuple[str, str] | None = None  # (side, reason) of the last top-level turn

    def _line(self, text: str, style: str | None = None) -> None:
        if self._speaking is not None:
            self.console.print()
            self._speaking = None
        self.console.print(text, style=style, markup=False)

    def show(self, event: Event) -> None:
        data = event.data if isinstance(event.data, dict) else {}
        handler = getattr(self, f"_on_{event.type}", None)
        if handler is not None:
            handler(data)
        elif event.type not in _QUIET:
            self._line(f"  • {event.type}: {data if data else ''}", "magenta")

    def _on_text_delta(self, data: dict[str, Any]) -> None:
        who = (data.get("side", "?"), data.get("depth", 0))
        if self._speaking != who:
            if self._speaking is not None:
                self.console.print()
            side, depth = who
            indent = "    " * depth
            label = self.side_names.get(side, side)
            self.console.print(
                f"{indent}[{side.upper()} · {label}] ",
                style="bold cyan" if side == "a" else "bold green",
                end="",
                markup=False,
            )
            self._speaking = who
        self.console.print(data.get("text", ""), end="", markup=False, soft_wrap=True)

    def _on_tool_call_started(self, data: dict[str, Any]) -> None:
        progress = (
            f" {data['progress_argument']}={data['progress_value']!r}" if data.get("progress_value") is not None else ""
        )
        self._line(f"{'    ' * data.get('depth', 0)}  ⚙ {data.get('name')}{progress} …", "yellow")

    def _on_tool_result(self, data: dict[str, Any]) -> None:
        indent = "    " * data.get("depth", 0)
        content = data.get("content") or ""
        if data.get("tool_status") == "success":
            content = content.replace("\n", " ")
            content = content if len(content) <= 100 else content[:97] + "..."
            self._line(f"{indent}    ✓ {data.get('name')}: {content}", "yellow")
            self._attachments(data, indent)
            return
        self._line(f"{indent}    ✗ {data.get('name')}: {content}", "red")  # in full: the developer needs all of it
        stack = (data.get("metadata") or {}).get("stack")
        if stack and self.verbose:
            self._line("\n".join(f"{indent}      {line}" for line in stack.rstrip().splitlines()), "dim")
        elif stack:
            hint = "(traceback stored with the message; --traceback or --log-level DEBUG shows it)"
            self._line(f"{indent}      {hint}", "dim")

    def _on_tool_invoked(self, data: dict[str, Any]) -> None:
        self._line(f"{'    ' * data.get('depth', 0)}      ↳ {data.get('name')} (invoked by a tool) …", "yellow")

    def _on_tool_invoked_result(self, data: dict[str, Any]) -> None:
        ok = data.get("tool_status") == "success"
        content = str(data.get("content") or "").replace("\n", " ")
        if ok and len(content) > 100:
            content = content[:97] + "..."
        indent = "    " * data.get("depth", 0)
        self._line(f"{indent}        {'✓' if ok else '✗'} {data.get('name')}: {content}", "yellow" if ok else "red")

    def _on_approval_requested(self, data: dict[str, Any]) -> None:
        self._line(f"  ⏸ {data.get('tool')} waits for approval (call {data.get('call_id')})", "yellow")

    def _on_approval_decided(self, data: dict[str, Any]) -> None:
        reason = f": {data.get('reason')}" if data.get("reason") else ""
        self._line(f"  ⏵ {data.get('tool')} {data.get('decision')}{reason}", "yellow")

    def _on_question_asked(self, data: dict[str, Any]) -> None:
        self._line(f"  ? {data.get('tool')} asks a question (call {data.get('call_id')})", "yellow")

    def _on_message_created(self, data: dict[str, Any]) -> None:
        if data.get("role") == "user" and data.get("side") == "b" and data.get("depth", 0) == 0 and not self._speaking:
            self._line(f"[B · person] {data.get('content')}", "bold green")
        elif data.get("side") is None:
            self._line(f"  ✉ injected {data.get('role')}: {data.get('content')}", "dim")
        self._attachments(data, "    " * data.get("depth", 0))

    def _attachments(self, data: dict[str, Any], indent: str) -> None:
        for ref in data.get("attachments") or []:
            size = _size(int(ref.get("size") or 0))
            self._line(
                f"{indent}      📎 {ref.get('name')} ({ref.get('mime_type')}, {size}) id {ref.get('id')}", "cyan"
            )

    def _on_turn_ended(self, data: dict[str, Any]) -> None:
        if data.get("depth", 0) == 0 and data.get("side") and data.get("reason"):
            self._turn_end = (data["side"], data["reason"])
        if self._speaking is not None:
            self.console.print()
            self._speaking = None

    def _on_stream_restarted(self, data: dict[str, Any]) -> None:
        self._line(f"  ↻ stream restarted (attempt {data.get('attempt')}): {data.get('reason')}", "red")

    def _on_model_fallback(self, data: dict[str, Any]) -> None:
        self._line(f"  ↪ fallback {data.get('from')} → {data.get('to')}: {data.get('error')}", "red")

    def _on_execution_failed(self, data: dict[str, Any]) -> None:
        self._line(f"  ✗ execution failed: {data.get('error')}", "bold red")

    def summary(self, result: ExecutionResult) -> None:
        u = result.usage
        self._line("")
        self.console.print(
            f"Stopped: {self._why(result)} · this execution: steps {result.step_count} "
            f"(a {result.side_a_step_count}, b {result.side_b_step_count}) · thread total: tokens in {u.input_tokens} "
            f"/ out {u.output_tokens}, cost ${u.cost:.6f}",
            style="bold",
            markup=False,
        )

    def _why(self, result: Any) -> str:
        """The execution's reason as `result.reason` says it; `rest` (waiting for the person) adds how
        the last turn ended (`response`, `max_steps`, ...), in the words of `turn_ended`'s reason."""
        by = f" by side {result.stopped_by}" if result.stopped_by else ""
        if result.reason != "rest":
            return f"{result.reason}{by}"
        if self._turn_end is None:
            return "rest (the thread waits for the next message)"
        side, reason = self._turn_end
        return f"rest (side {side}'s turn ended: {reason}; the thread waits for the next message)"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    return f"{count / 1024:.1f} KB" if count < 1024**2 else f"{count / 1024**2:.1f} MB"


_QUIET = frozenset(
    {"thread_created", "execution_started", "turn_started", "step_started", "execution_stopped", "message_updated"}
)

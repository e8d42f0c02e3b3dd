"""`orchestrator run` asks the person for waiting calls: in a terminal (a real pty), and piped on stdin.

The model is the offline `test` model (it calls every tool once, then sums up), so the refund tool, which
needs approval, makes every run wait once; what the tool received shows in the stored results.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.asking import DEFAULT_REJECTION, Asker, parse_approval
from orchestrator.cli.main import main
from orchestrator.core.waiting import WaitingCall

REPO = Path(__file__).resolve().parents[1]

REFUND = """
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool

class Args(BaseModel):
    order_id: str = "A1"
    amount: float = 120.0

async def execute(state, args: Args) -> ToolResult:
    return ToolResult.ok(f"refunded {args.amount} on {args.order_id}")

tool = define_tool(description="Refund an order", args=Args, execute=execute, needs_approval=True)
"""

CONFIRM = """
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool

class Args(BaseModel):
    order_id: str = "A1"

async def execute(state, args: Args) -> ToolResult:
    reply = await state.ask({"question": f"Really close {args.order_id}?"})
    return ToolResult.ok(f"closed {args.order_id}: {reply}")

tool = define_tool(description="Close an order after asking", args=Args, execute=execute)
"""


def _project(root: Path, tool: str = "refund", source: str = REFUND) -> Path:
    for folder in ("tools", "prompts", "agents"):
        (root / "agents" / folder).mkdir(parents=True, exist_ok=True)
    (root / "agents" / "tools" / f"{tool}.py").write_text(source)
    (root / "agents" / "prompts" / "clerk.py").write_text(
        textwrap.dedent(f"""
        from orchestrator import define_prompt
        prompt = define_prompt(prompt="You help with orders.", tool_description="a clerk", tools=("{tool}",))
        """)
    )
    (root / "agents" / "agents" / "orders.py").write_text(
        "from orchestrator import Side, define_agent\nagent = define_agent(type='ai_human', side_a=Side('clerk'))\n"
    )
    return root


def _run(root: Path, stdin: str, *extra: str) -> tuple[int, str]:
    db = root / "t.db"
    args = ["run", "orders", "--path", str(root / "agents"), "--config", str(REPO / "configs" / "default.yaml")]
    args += ["--model", "test", "--db", str(db), *extra]
    result = CliRunner().invoke(main, args, input=stdin, catch_exceptions=False)
    return result.exit_code, result.output


def _tool_results(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name, content FROM messages WHERE role = 'tool' ORDER BY rowid").fetchall()
    return [(str(n), str(c)) for n, c in rows]


def test_piped_y_approves_and_the_tool_runs(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, out = _run(root, "refund order A1\ny\n")
    assert code == 0, out
    assert 'wants to call refund {"amount": ' in out and "Approve? [y/n or a reason] y" in out
    [(name, content)] = _tool_results(root / "t.db")
    assert name == "refund" and content.startswith("refunded ")
    assert "Stopped: rest" in out


def test_piped_n_rejects_with_the_default_reason_and_text_with_that_reason(tmp_path: Path) -> None:
    root = _project(tmp_path / "n")
    code, out = _run(root, "refund order A1\nn\n")
    assert code == 0, out
    [(name, content)] = _tool_results(root / "t.db")
    assert name == "refund" and "rejected and did not run" in content and DEFAULT_REJECTION in content

    root = _project(tmp_path / "reason")
    code, out = _run(root, "refund order A1\n\nover the limit, ask a manager\n")  # the blank line is skipped
    assert code == 0, out
    [(_, content)] = _tool_results(root / "t.db")
    assert content.endswith("over the limit, ask a manager")


def test_input_ending_leaves_the_call_waiting_and_does_not_hang(tmp_path: Path) -> None:
    root = _project(tmp_path)
    code, out = _run(root, "", "-m", "refund order A1")
    assert code == 0, out
    assert "no decision given (input ended)" in out and "refund (call" in out
    assert "Stopped: awaiting_approval" in out
    assert _tool_results(root / "t.db") == []  # nothing ran, nothing was made up
    with sqlite3.connect(root / "t.db") as conn:
        [(status,)] = conn.execute("SELECT status FROM threads").fetchall()
    assert status == "waiting"


def test_a_question_from_state_ask_takes_the_answer_text(tmp_path: Path) -> None:
    root = _project(tmp_path, "close_order", CONFIRM)
    code, out = _run(root, "close A1\nyes, close it\n")
    assert code == 0, out
    assert "close_order asks: " in out and "Really close " in out
    [(name, content)] = _tool_results(root / "t.db")
    assert name == "close_order" and content.startswith("closed ") and content.endswith(": yes, close it")


def test_parse_approval_words() -> None:
    assert parse_approval("Y").kind == "approved" and parse_approval(" yes ").kind == "approved"
    assert parse_approval("no").reason == DEFAULT_REJECTION
    assert parse_approval("not today").model_dump()["reason"] == "not today"


def test_asker_returns_none_at_the_end_of_input() -> None:
    lines = iter(["", "   "])
    said: list[str] = []

    async def read(prompt: str) -> str | None:
        return next(lines, None)

    call = WaitingCall(thread_id="t", call_id="c1", kind="approval", tool="refund", side="a", requested_at=0.0)
    assert asyncio.run(Asker(read, said.append).decision(call)) is None
    assert said and "refund" in said[0]


def _read_until(fd: int, needle: bytes, seen: bytearray, deadline: float) -> None:
    while needle not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {needle!r}; got {bytes(seen[-800:])!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            assert chunk, f"the process ended before {needle!r}; got {bytes(seen[-800:])!r}"
            seen += chunk


def test_run_in_a_terminal_asks_and_a_reason_rejects(tmp_path: Path) -> None:
    """A real pty: stdin is a terminal, so the session prompts there (`input`), and the reason typed is
    what the model reads."""
    root = _project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["TERM"] = "dumb"
    command = [sys.executable, "-c", "from orchestrator.cli.main import main; main()", "run", "orders"]
    command += ["--path", str(root / "agents"), "--config", str(REPO / "configs" / "default.yaml")]
    command += ["--model", "test", "--db", str(root / "t.db"), "-m", "refund order A1"]
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, stdin=follower, stdout=follower, stderr=follower, env=env, cwd=tmp_path)
    os.close(follower)
    seen = bytearray()
    try:
        deadline = time.monotonic() + 90
        _read_until(leader, b"Approve? [y/n or a reason]", seen, deadline)
        os.write(leader, b"too much money\n")
        _read_until(leader, b"Stopped:", seen, deadline)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    assert b"wants to call refund" in seen
    [(_, content)] = _tool_results(root / "t.db")
    assert content.endswith("too much money")

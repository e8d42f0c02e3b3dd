"""`orchestrator fork` and `orchestrator rewind` on a SQLite file: the new thread, and errors a person can act on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import main
from orchestrator.core.messages import Message, ToolCall
from orchestrator.runtime import Runtime

ROOT = Path(__file__).resolve().parents[1]


def _thread(db: Path) -> str:
    async def make() -> str:
        runtime = Runtime.from_path(ROOT / "agents", config=ROOT / "configs/default.yaml", storage=str(db))
        async with runtime:
            thread = await runtime.create_thread("support_demo")
            tid = thread.id
            await runtime.storage.append_messages(
                tid,
                [
                    Message(thread_id=tid, side="a", role="assistant", content="Hello"),
                    Message(thread_id=tid, side="a", role="assistant", tool_calls=[ToolCall(id="c1", name="x")]),
                    Message(thread_id=tid, side="a", role="tool", tool_call_id="c1", name="x", content="ok"),
                ],
            )
            await thread.state.set_value("k", "v")
            return tid

    return asyncio.run(make())


def _args(db: Path) -> list[str]:
    return ["--path", str(ROOT / "agents"), "--config", str(ROOT / "configs/default.yaml"), "--db", str(db)]


def test_fork_prints_the_new_thread_and_rewind_the_superseded_count(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    tid = _thread(db)
    res = CliRunner().invoke(main, ["fork", tid, "--at", "3", "--json", *_args(db)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["forked_from"] == tid and out["forked_at"] == 3 and out["id"].startswith("thr_")
    res = CliRunner().invoke(main, ["rewind", tid, "--to", "1", *_args(db)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"{tid} rewound to message 1 (2 later messages superseded)"


def test_a_point_inside_a_step_names_the_nearest_points_without_a_traceback(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    tid = _thread(db)
    res = CliRunner().invoke(main, ["fork", tid, "--at", "2", *_args(db)])
    assert res.exit_code == 1
    assert "inside a step" in res.output and "nearest valid points: before 1, after 3" in res.output
    assert "Traceback" not in res.output and "--traceback" not in res.output
    res = CliRunner().invoke(main, ["fork", tid, "--at", "0", *_args(db)])
    assert res.exit_code == 2 and "--at" in res.output
    res = CliRunner().invoke(main, ["fork", "thr_missing", "--at", "1", *_args(db)])
    assert res.exit_code == 1 and "thread not found: 'thr_missing'" in res.output

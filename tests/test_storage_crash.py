"""A process killed mid-commit leaves every step wholly present or wholly absent.

The child (this file run as a script) commits steps in a loop, each one an
assistant message, two events and the thread row, and prints each step number
once its commit returned. The parent kills it with SIGKILL at seeded random
moments, then reopens the file and checks the steps, the seqs and the file.
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.core.messages import Event, ExecutionSnapshot, Message, ThreadRecord, Usage
from orchestrator.storage import StepWrite
from orchestrator.storage.sqlite import SQLiteStorage

THREAD_ID = "thr_crash"
KILL_POINTS = 5
SEED = 20261129


async def _child(path: str) -> None:
    async with SQLiteStorage(path) as storage:
        thread = await storage.get_thread(THREAD_ID)
        step = thread.execution.step_count if thread.execution else 0
        while True:
            step += 1
            thread = thread.model_copy(
                update={
                    "execution": ExecutionSnapshot(flow_id="f", step_count=step),
                    "usage": Usage(requests=step),
                    "updated_at": time.time(),
                }
            )
            await storage.commit(
                StepWrite(
                    thread_id=THREAD_ID,
                    new_messages=[
                        Message(
                            thread_id=THREAD_ID,
                            role="assistant",
                            content=f"step {step} " + "x" * 4000,
                            metadata={"step": step},
                        )
                    ],
                    events=[
                        Event(thread_id=THREAD_ID, seq=2 * step - 1, type="step_started", data={"step": step}),
                        Event(thread_id=THREAD_ID, seq=2 * step, type="step_finished", data={"step": step}),
                    ],
                    thread=thread,
                )
            )
            print(step, flush=True)


def _run_and_kill(path: str, rng: random.Random) -> int:
    """Start the child, let it commit a random number of steps, SIGKILL it; the last step it reported."""
    proc = subprocess.Popen([sys.executable, __file__, path], stdout=subprocess.PIPE, text=True)
    try:
        wait_for = rng.randint(1, 40)
        reported = 0
        for _ in range(wait_for):
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, f"child exited early with code {proc.poll()}"
            reported = int(line)
        time.sleep(rng.uniform(0, 0.05))  # a real kill needs a real moment: land anywhere in the next commit
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        return reported
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


async def _check(path: str, reported: int) -> int:
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    async with SQLiteStorage(path) as storage:
        thread = await storage.get_thread(THREAD_ID)
        steps = thread.execution.step_count if thread.execution else 0
        page = await storage.get_messages(THREAD_ID)
        events = await storage.events_after(THREAD_ID, 0)
    # every step the child saw committed is there (it may have committed more: the pipe buffers)
    assert steps >= reported
    assert thread.usage.requests == steps
    assert [m.seq for m in page.messages] == list(range(1, steps + 1))
    assert [m.metadata["step"] for m in page.messages] == list(range(1, steps + 1))
    assert [e.seq for e in events] == list(range(1, 2 * steps + 1))
    assert [e.data["step"] for e in events] == [s for s in range(1, steps + 1) for _ in (0, 1)]
    return steps


@pytest.mark.slow
async def test_sigkill_mid_commit_leaves_whole_steps(tmp_path: Path) -> None:
    path = str(tmp_path / "crash.db")
    async with SQLiteStorage(path) as storage:
        await storage.create_thread(ThreadRecord(id=THREAD_ID, agent_id="crash"))
    rng = random.Random(SEED)
    total = 0
    for _ in range(KILL_POINTS):
        reported = await asyncio.to_thread(_run_and_kill, path, rng)
        steps = await _check(path, reported)
        assert steps >= total  # nothing committed before is ever lost
        total = steps
    assert total >= KILL_POINTS


if __name__ == "__main__":
    asyncio.run(_child(sys.argv[1]))

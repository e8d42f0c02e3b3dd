"""kill -9 at random points of `dual_ai` executions; a new process resumes them.

A seeded loop: start a worker process (tests/crash_child.py) on one SQLite
file, SIGKILL it after a random number of kill points (model request, tool
start/end, either side of a commit), start the next worker on the same file,
and so on; each worker resumes the threads the dead one left "running". When
a batch of threads completes, a new batch starts. At the end every thread must
hold exactly the transcript an uninterrupted run produces (nothing lost,
nothing twice), with one creation event per message, and no tool may have run
in a process that started after its result was stored.

The tool calls of a step run in parallel with different durations (the
second finishes first), so a kill often lands after one result is stored and
before the other: the stored one must not run again. Side b calls a prompt as a
tool, whose nested loop makes a tool call of its own: a kill inside it must not
start that loop over. Side a's second call queues a tool (`queue_tool`): a kill
between the two must not lose it. Workers use the real
lease clock: each one takes the dead one's leases at once (the owner's
process is gone), with no TTL wait. On SQLite and on PostgreSQL.

10 kill points by default; ORCHESTRATOR_CRASH_POINTS=50 for more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from storage_backends import PG_DSN, postgres_unreachable

from orchestrator.core.messages import ThreadRecord
from orchestrator.storage import Storage
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.storage.sqlite import SQLiteStorage

CHILD = Path(__file__).resolve().parent / "crash_child.py"
SEED = 20261130
THREADS_PER_BATCH = 3
LINE_TIMEOUT = 120.0


@dataclass
class CrashReport:
    kills: int = 0
    processes: int = 0
    threads: int = 0
    messages: int = 0
    lost: int = 0  # reference messages missing from a crashed thread
    duplicated: int = 0  # messages beyond the reference, or stored twice
    duplicate_tool_runs: int = 0  # runs in a process that started after the result was stored
    tool_reruns_before_store: int = 0  # allowed: killed between the run and storing its result
    problems: list[str] = field(default_factory=list)
    event_problems: list[str] = field(default_factory=list)  # the event log vs the stored messages


class _Zygote:
    """The serving child: forks one worker per `run`, reports its exit."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            text=True,
            bufsize=1,
            cwd=CHILD.parent.parent,
        )
        self.worker: int | None = None  # the live worker's pid, killed on close if it hangs
        self.last: list[str] = []
        assert self.readline() == "READY"

    def readline(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], LINE_TIMEOUT)
        if not ready:
            if self.worker is not None:  # a hang: have the worker print its stacks (stderr) before we give up
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.worker, signal.SIGUSR1)
                select.select([], [], [], 2)
            raise TimeoutError(
                f"crash child said nothing for {LINE_TIMEOUT} s (worker {self.worker}); last lines: {self.last[-5:]}"
            )
        line = self.proc.stdout.readline()
        self.last = [*self.last[-20:], line.strip()]
        if not line:
            raise RuntimeError(f"crash child exited (code {self.proc.poll()})")
        return line.strip()

    def run(self, db: str, runs: Path, label: str, index: int, kill_after: int | None) -> bool:
        """One worker; SIGKILL it at its `kill_after`-th kill point. True if it was killed.
        Its lease clock is the real one: the next worker takes a dead one's leases at once."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {db} {runs} {label} 0 {index * 1000}\n")
        self.proc.stdin.flush()
        pid, seen, killed = None, 0, False
        while True:
            line = self.readline()
            if line.startswith("PID "):
                pid = self.worker = int(line.split()[1])
            elif line.startswith("@@ ") and not killed:
                seen += 1
                if kill_after is not None and seen >= kill_after:
                    try:
                        os.kill(pid, signal.SIGKILL)  # type: ignore[arg-type]
                        killed = True
                    except ProcessLookupError:  # it finished (and was reaped) before we read this line
                        pass
            elif line.startswith("EXIT "):
                self.worker = None
                status = int(line.split()[2])
                if not killed and status != 0:
                    raise AssertionError(f"worker {label} failed (wait status {status}); see its stderr above")
                return killed

    def close(self) -> None:
        if self.worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.worker, signal.SIGKILL)
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


# -- reading the database ------------------------------------------------------------


def _open(db: str) -> Storage:
    """`pg:<schema>` (as tests/crash_child.py reads it) or a SQLite file."""
    if db.startswith("pg:"):
        return PostgresStorage(PG_DSN, schema=db[3:])
    return SQLiteStorage(db)


async def _drop_schema(db: str) -> None:
    if db.startswith("pg:"):
        import asyncpg

        conn = await asyncpg.connect(PG_DSN)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{db[3:]}" CASCADE')
        finally:
            await conn.close()


async def _create(db: str, tags: list[str]) -> None:
    async with _open(db) as storage:
        for tag in tags:
            await storage.create_thread(ThreadRecord(id=f"thr_{tag}", agent_id="duo", arguments={"tag": tag}))


async def _threads(db: str) -> list[tuple[ThreadRecord, list[Any], list[Any]]]:
    async with _open(db) as storage:
        out = []
        for thread in await storage.list_threads(limit=10_000):
            messages = (await storage.get_messages(thread.id, include_silent=True)).messages
            out.append((thread, messages, await storage.events_after(thread.id, 0)))
        return out


def _stored_tokens(threads: list[tuple[ThreadRecord, list[Any], list[Any]]]) -> set[str]:
    return {m.content.split()[1] for _, messages, _ in threads for m in messages if m.role == "tool" and m.content}


def _transcript(thread: ThreadRecord, messages: list[Any]) -> list[tuple[Any, ...]]:
    """The thread's messages, comparable across runs. A step's tool results are
    stored as each call completes, so their stored order follows timing; they
    are put in call order (the order the model reads them in) first."""
    tag = thread.arguments["tag"]
    norm = lambda text: text.replace(tag, "T") if text else text  # noqa: E731
    return [
        (m.side, m.role, norm(m.content), m.name, tuple((c.name, norm(c.arguments)) for c in m.tool_calls or []))
        for m in _results_in_call_order(messages)
    ]


def _results_in_call_order(messages: list[Any]) -> list[Any]:
    out: list[Any] = []
    order: dict[str, int] = {}
    results: list[Any] = []
    for m in [*messages, None]:
        if m is not None and m.role == "tool":
            results.append(m)
            continue
        out.extend(sorted(results, key=lambda r: order.get(r.tool_call_id, len(order))))
        results = []
        if m is not None:
            if m.tool_calls:
                order = {c.id: i for i, c in enumerate(m.tool_calls)}
            out.append(m)
    return out


def _runs(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()) for line in path.read_text().splitlines() if line.strip()]  # type: ignore[misc]


# -- the loop --------------------------------------------------------------------------


def crash_loop(tmp: Path, points: int, seed: int = SEED, backend: str = "sqlite") -> CrashReport:
    rng = random.Random(seed)
    report = CrashReport()
    db = str(tmp / "crash.db") if backend == "sqlite" else f"pg:crash_{uuid.uuid4().hex[:12]}"
    runs, ref_db = tmp / "runs.txt", str(tmp / "reference.db")
    try:
        return _crash_loop(db, runs, ref_db, points, rng, report)
    finally:
        asyncio.run(_drop_schema(db))


def _crash_loop(db: str, runs: Path, ref_db: str, points: int, rng: random.Random, report: CrashReport) -> CrashReport:
    zygote = _Zygote()
    try:
        asyncio.run(_create(ref_db, ["REF"]))
        zygote.run(ref_db, runs.with_name("ref_runs.txt"), "ref", 0, None)
        [(ref_thread, ref_messages, _)] = asyncio.run(_threads(ref_db))
        assert ref_thread.status == "completed", ref_thread.status
        reference = _transcript(ref_thread, ref_messages)
        ref_events = asyncio.run(_threads(ref_db))[0][2]
        _check_thread(ref_thread, ref_messages, ref_events, reference, ref_thread, report)

        batch = 0
        asyncio.run(_create(db, [f"B{batch}T{i}" for i in range(THREADS_PER_BATCH)]))
        index = 1
        while True:
            final = report.kills >= points
            before = asyncio.run(_threads(db))
            if not final and all(t.status == "completed" for t, _, _ in before):
                batch += 1
                asyncio.run(_create(db, [f"B{batch}T{i}" for i in range(THREADS_PER_BATCH)]))
            stored = _stored_tokens(before)
            label = f"p{index}"
            killed = zygote.run(db, runs, label, index, None if final else rng.randint(1, 60))
            report.processes += 1
            report.kills += killed
            here = [token for who, token in _runs(runs) if who == label]
            twice = sorted(set(here) & stored)
            report.duplicate_tool_runs += len(twice) + sum(n - 1 for n in Counter(here).values() if n > 1)
            if twice:
                report.problems.append(f"{label} re-ran tools whose results were stored: {twice}")
            index += 1
            if final:
                break
    finally:
        zygote.close()

    threads = asyncio.run(_threads(db))
    run_counts = Counter(token for _, token in _runs(runs))
    report.tool_reruns_before_store = sum(n - 1 for n in run_counts.values()) - report.duplicate_tool_runs
    report.threads = len(threads)
    for thread, messages, events in threads:
        report.messages += len(messages)
        _check_thread(thread, messages, events, reference, ref_thread, report)
    return report


def _check_thread(
    thread: ThreadRecord,
    messages: list[Any],
    events: list[Any],
    reference: list[Any],
    ref: ThreadRecord,
    report: CrashReport,
) -> None:
    name = thread.arguments["tag"]
    if thread.status != "completed":
        report.problems.append(f"{name}: status {thread.status!r}, expected 'completed'")
    got = _transcript(thread, messages)
    missing = Counter(reference) - Counter(got)
    extra = Counter(got) - Counter(reference)
    report.lost += sum(missing.values())
    report.duplicated += sum(extra.values())
    if got != reference:
        report.problems.append(f"{name}: transcript differs: missing {dict(missing)}, extra {dict(extra)}")
    assert ref.execution is not None and thread.execution is not None
    counters = lambda e: (e.step_count, e.side_a_step_count, e.side_b_step_count, e.turn_count, e.reason)  # noqa: E731
    if counters(thread.execution) != counters(ref.execution):
        report.problems.append(
            f"{name}: counters {counters(thread.execution)} != uninterrupted {counters(ref.execution)}"
        )
    created = Counter(e.data["id"] for e in events if e.type in ("message_created", "tool_result"))
    ids = [m.id for m in messages]
    if sorted(created) != sorted(ids) or any(n != 1 for n in created.values()):
        without = [m.seq for m in messages if created[m.id] == 0]
        twice = [m.seq for m in messages if created[m.id] > 1]
        report.event_problems.append(
            f"{name}: messages without a creation event (by seq): {without}; with several: {twice}"
        )
    turns, turn = Counter[tuple[str, int]](), 0
    for e in events:
        if e.type == "turn_started":
            turn = e.data["turn"]
        if e.type in ("turn_started", "turn_ended"):
            turns[(e.type, turn)] += 1
    if any(n != 1 for n in turns.values()):
        twice = sorted(k for k, n in turns.items() if n > 1)
        report.event_problems.append(f"{name}: turns announced more than once: {twice}")
    seqs = [e.seq for e in events]
    if seqs != sorted(set(seqs)):
        report.event_problems.append(f"{name}: event seqs not unique and increasing")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def crash_report(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> CrashReport:
    if request.param == "postgres":
        reason = asyncio.run(postgres_unreachable())
        if reason:
            pytest.skip(reason)
    points = int(os.environ.get("ORCHESTRATOR_CRASH_POINTS", "10"))
    report = crash_loop(tmp_path_factory.mktemp("crash"), points, backend=request.param)
    assert report.kills == points
    return report


@pytest.mark.slow
def test_resume_after_kill_loses_nothing_and_runs_no_stored_tool_again(crash_report: CrashReport) -> None:
    assert crash_report.threads >= THREADS_PER_BATCH
    assert not crash_report.problems, "\n".join(crash_report.problems)
    assert crash_report.lost == 0 and crash_report.duplicated == 0 and crash_report.duplicate_tool_runs == 0, (
        crash_report
    )


@pytest.mark.slow
def test_event_log_has_one_creation_event_per_message_and_one_start_and_end_per_turn(
    crash_report: CrashReport,
) -> None:
    assert not crash_report.event_problems, "\n".join(crash_report.event_problems)

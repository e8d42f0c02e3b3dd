"""Time travel benchmark: fork of a thread with 1,000 messages and 1,000 values, and what the value log
costs `set_value` / `get_value` (docs/performance.md).

    .venv/bin/python bench/fork.py                       # SQLite and, if reachable, PostgreSQL
    .venv/bin/python bench/fork.py --backend sqlite --messages 1000 --values 1000

Both sides of the value comparison run in this one process, interleaved round by round: "with log" is
today's schema; "without log" is the same schema with the value-log triggers dropped, which is the
write path as it was before the log (`set_value` / `get_value`'s Python and SQL did not change; the log
is the triggers). Fork is `Thread.fork` (the outline read, the point check, the copy in one transaction).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from orchestrator.core.messages import Message, ThreadRecord, ToolCall
from orchestrator.runtime import Runtime
from orchestrator.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DSN = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
TARGET_MS = 50.0
TEXT = "The order #4711 shipped yesterday and should arrive within three business days. "
_TRIGGERS = {
    "sqlite": [
        f"DROP TRIGGER {name}"
        for name in (
            "thread_values_logged_insert",
            "thread_values_logged_update",
            "thread_values_logged_delete",
            "env_values_logged_insert",
            "env_values_logged_update",
            "env_values_logged_delete",
        )
    ],
    "postgres": [
        "DROP TRIGGER thread_values_logged ON thread_values",
        "DROP TRIGGER env_values_logged_write ON env_values",
        "DROP TRIGGER env_values_logged_delete ON env_values",
    ],
}


@asynccontextmanager
async def _storage(backend: str, dsn: str, tmp: Path, name: str, log: bool) -> AsyncIterator[Storage]:
    if backend == "sqlite":
        import sqlite3
        from contextlib import closing

        from orchestrator.storage.sqlite import SQLiteStorage

        path = tmp / f"{name}.db"
        async with SQLiteStorage(str(path)):
            pass  # migrated
        if not log:
            with closing(sqlite3.connect(path)) as conn, conn:
                for statement in _TRIGGERS["sqlite"]:
                    conn.execute(statement)
        async with SQLiteStorage(str(path)) as storage:
            yield storage
        return
    import asyncpg

    from orchestrator.storage.postgres import PostgresStorage

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresStorage(dsn, schema=schema) as storage:
            if not log:
                conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
                try:
                    for statement in _TRIGGERS["postgres"]:
                        await conn.execute(statement)
                finally:
                    await conn.close()
            yield storage
    finally:
        conn = await asyncpg.connect(dsn)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def _filled(storage: Storage, n_messages: int, n_values: int) -> ThreadRecord:
    """A support_demo thread: steps with a tool call and its result every 10 messages, values written
    between them, so the log holds entries at every point."""
    thread = await storage.create_thread(ThreadRecord(agent_id="support_demo"))
    per_message = max(1, n_values // n_messages)
    written = 0
    for i in range(n_messages):
        if i % 10 == 8:
            call = ToolCall(id=f"call_{i}", name="lookup_order", arguments='{"order_id": "42"}')
            message = Message(thread_id=thread.id, side="a", role="assistant", tool_calls=[call])
        elif i % 10 == 9:
            message = Message(thread_id=thread.id, side="a", role="tool", tool_call_id=f"call_{i - 1}", content=TEXT)
        else:
            message = Message(thread_id=thread.id, side="ab"[i % 2], role="assistant", content=f"{i} {TEXT}")  # type: ignore[arg-type]
        await storage.append_messages(thread.id, [message])
        for _ in range(per_message):
            if written < n_values:
                await storage.set_value(thread.id, f"key_{written % (n_values // 2 or 1)}", {"n": written})
                written += 1
    while written < n_values:
        await storage.set_value(thread.id, f"key_{written}", {"n": written})
        written += 1
    return thread


async def _ms(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return (time.perf_counter() - start) * 1000


async def _values_side_by_side(
    with_log: Storage, without: Storage, rounds: int, per_round: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """µs per call, each round timing both storages back to back (order alternating)."""
    a = await with_log.create_thread(ThreadRecord(agent_id="bench"))
    b = await without.create_thread(ThreadRecord(agent_id="bench"))
    out: dict[str, dict[str, list[float]]] = {"with": {"set": [], "get": []}, "without": {"set": [], "get": []}}
    for r in range(rounds + 1):  # round 0 warms both up and is not counted
        pairs = [("with", with_log, a.id), ("without", without, b.id)]
        for label, storage, tid in pairs if r % 2 == 0 else pairs[::-1]:
            start = time.perf_counter()
            for i in range(per_round):
                await storage.set_value(tid, f"k{i % 50}", {"i": i, "r": r})
            if r:
                out[label]["set"].append((time.perf_counter() - start) * 1e6 / per_round)
            start = time.perf_counter()
            for i in range(per_round):
                await storage.get_value(tid, f"k{i % 50}")
            if r:
                out[label]["get"].append((time.perf_counter() - start) * 1e6 / per_round)
    return out["with"], out["without"]


async def bench(backend: str, dsn: str, n_messages: int, n_values: int, forks: int) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            _storage(backend, dsn, Path(tmp), "log", True) as storage,
            _storage(backend, dsn, Path(tmp), "nolog", False) as old,
        ):
            runtime = Runtime.from_path(ROOT / "agents", config=ROOT / "configs/default.yaml", storage=storage)
            async with runtime:
                record = await _filled(storage, n_messages, n_values)
                thread = await runtime.get_thread(record.id)
                for label, at in (("last message", n_messages), ("middle", n_messages // 2)):
                    samples = [await _ms(lambda at=at: thread.fork(at)) for _ in range(forks)]  # type: ignore[misc]
                    p50 = statistics.median(samples)
                    rows.append(
                        (
                            f"fork at the {label} ({n_messages:,} messages, {n_values:,} values) p50 / max",
                            f"{p50:.1f} / {max(samples):.1f} ms",
                            "meets < 50 ms" if p50 < TARGET_MS else "MISSES < 50 ms",
                        )
                    )
                with_log, without = await _values_side_by_side(storage, old, rounds=16, per_round=200)
                for op in ("set", "get"):
                    new, before = statistics.median(with_log[op]), statistics.median(without[op])
                    noise = statistics.pstdev(without[op]) / before
                    verdict = (
                        "same within noise"
                        if abs(new / before - 1) <= max(0.05, 2 * noise)
                        else ("slower" if new > before else "faster")
                    )
                    rows.append(
                        (
                            f"{op}_value with log vs without (median of 16 x 200 calls)",
                            f"{new:.0f} vs {before:.0f} µs (x{new / before:.2f}, noise ±{noise:.0%})",
                            verdict,
                        )
                    )
    return rows


async def _postgres_reachable(dsn: str) -> bool:
    try:
        import asyncpg

        conn = await asyncpg.connect(dsn, timeout=3)
        await conn.close()
        return True
    except Exception:
        return False


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--messages", type=int, default=1_000)
    parser.add_argument("--values", type=int, default=1_000)
    parser.add_argument("--forks", type=int, default=10)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    backends = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    print("| backend | measure | result | verdict |")
    print("|---|---|---|---|")
    for backend in backends:
        if backend == "postgres" and not await _postgres_reachable(args.dsn):
            print(f"| postgres | (skipped: not reachable at {args.dsn}) | | |")
            continue
        for label, result, verdict in await bench(backend, args.dsn, args.messages, args.values, args.forks):
            print(f"| {backend} | {label} | {result} | {verdict} |")


if __name__ == "__main__":
    asyncio.run(main())

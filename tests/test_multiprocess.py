"""One API server and three workers, as separate processes, on Temporal
(the tests' dev server), PostgreSQL and Redis.

200 dual_ai threads run on a scripted model; one worker is killed with SIGKILL
mid-run. Every thread must complete once, no tool may run again once its
result was stored, no message may be stored twice, and every WebSocket client
must see every event of its thread once, in order. The clients stop reading at
`execution_stopped`: it goes live only once the thread has settled, so nothing
follows it, even when the worker dies right after publishing it. A second
test stalls a worker (SIGSTOP) past the heartbeat timeout and lets it go on.

Run as a script, this file is the server or a worker process:
    python tests/test_multiprocess.py server SCHEMA PREFIX TEMPORAL TASK_QUEUE
    python tests/test_multiprocess.py worker SCHEMA PREFIX TEMPORAL TASK_QUEUE TAG
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
N_THREADS = int(os.environ.get("ORCH_MP_THREADS", "200"))
N_WORKERS = 3
LEASE_TTL = 2.0
HEARTBEAT_TIMEOUT = 2.0


def _options(address: str, task_queue: str) -> Any:
    from orchestrator.temporal import TemporalOptions

    return TemporalOptions(
        address=address, task_queue=task_queue, heartbeat_timeout=HEARTBEAT_TIMEOUT, retry_initial=0.2, retry_max=1.0
    )


# -- the child processes -----------------------------------------------------------


async def _runtime(schema: str, prefix: str) -> tuple[Any, Any]:
    from test_worker_support import PG_DSN, REDIS_URL, SCRIPTED_CONFIG, duo_definitions

    from orchestrator.core.settings import RuntimeSettings
    from orchestrator.runtime import Runtime
    from orchestrator.storage.broker import RedisBroker
    from orchestrator.storage.postgres import PostgresStorage
    from providers.config import config_from_dict

    storage = PostgresStorage(PG_DSN, schema=schema)
    runtime = Runtime(
        duo_definitions(),
        config=config_from_dict(SCRIPTED_CONFIG),
        storage=storage,
        settings=RuntimeSettings(lease_ttl=LEASE_TTL),
    )
    await runtime.open()
    broker = await RedisBroker(REDIS_URL, prefix=prefix, block_ms=2000).open()
    runtime.services.bus.use_broker(broker)
    return runtime, broker


async def _serve(schema: str, prefix: str, address: str, task_queue: str) -> None:
    import socket

    import uvicorn

    from orchestrator.server.app import create_app

    runtime, broker = await _runtime(schema, prefix)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(runtime, temporal=_options(address, task_queue), broker=broker),
            log_level="warning",
            lifespan="on",
            ws_max_size=2**20,
        )
    )
    print(json.dumps({"url": f"http://127.0.0.1:{port}", "ws": f"ws://127.0.0.1:{port}"}), flush=True)
    await server.serve(sockets=[sock])  # uvicorn handles SIGTERM
    await runtime.close()
    await broker.close()


async def _work(schema: str, prefix: str, address: str, task_queue: str, tag: str) -> None:
    import asyncpg
    import respx
    import test_worker_support as support

    from orchestrator.temporal.worker import Worker

    router = respx.mock(assert_all_called=False)
    router.start()
    support.UniqueIdsModel(support.answer, tag=tag).mount(router)
    support.set_recorder(
        await asyncpg.create_pool(support.PG_DSN, min_size=1, max_size=4, server_settings={"search_path": schema})
    )
    runtime, broker = await _runtime(schema, prefix)
    worker = Worker(
        runtime, _options(address, task_queue), broker=broker, concurrency=8, drain_timeout=5, sticky_timeout=1
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await worker.start()
    print(json.dumps({"worker": worker.name}), flush=True)
    await worker.run(stop)
    await runtime.close()
    await broker.close()


def _child_main(argv: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    role, schema, prefix, address, task_queue, *rest = argv
    if role == "server":
        asyncio.run(_serve(schema, prefix, address, task_queue))
    else:
        os.environ.setdefault("ORCH_TEST_TOOL_DELAY", "0.05")  # tools take a moment, so a kill lands mid-call sometimes
        asyncio.run(_work(schema, prefix, address, task_queue, rest[0]))


# -- the test ----------------------------------------------------------------------

if __name__ != "__main__":
    import pytest
    from test_worker_support import DUO_SHAPE, PG_DSN, pg_schema, redis_prefix, shape  # noqa: F401

    def _spawn(
        logs: Path, *args: str, env: dict[str, str] | None = None
    ) -> tuple[subprocess.Popen[str], dict[str, Any]]:
        """Start a child; its output goes to a file in `logs` (a pipe nobody reads would fill and block it)."""
        log = tempfile.NamedTemporaryFile("w+", dir=logs, prefix=f"{args[0]}-", suffix=".log", delete=False)
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=HERE.parent,
            env={**os.environ, **(env or {})},
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ready = next((line for line in Path(log.name).read_text().splitlines() if line.startswith("{")), None)
            if ready is not None:
                return proc, json.loads(ready)
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"child {args[0]} was not ready (code {proc.poll()}): {Path(log.name).read_text()[-3000:]}")

    def _stop_all(children: list[subprocess.Popen[str]]) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()

    async def _watch(ws_url: str, thread_id: str) -> list[dict[str, Any]]:
        import websockets

        seen: list[dict[str, Any]] = []
        async with websockets.connect(
            f"{ws_url}/threads/{thread_id}/events?after=0", max_size=2**22, ping_interval=None, open_timeout=60
        ) as ws:
            async for frame in ws:
                event = json.loads(frame)
                seen.append(event)
                if event["type"] == "execution_stopped":
                    return seen
            raise AssertionError(
                f"{thread_id}: socket closed after {len(seen)} events: {ws.close_code} {ws.close_reason}"
            )
        return seen

    async def _kill_when_busy(db: Any, victim: subprocess.Popen[str]) -> None:
        query = "SELECT COUNT(DISTINCT thread_id) FROM tool_runs WHERE pid = $1"
        while await db.fetchval(query, victim.pid) < 4:  # it holds executions, some mid-call
            await asyncio.sleep(0.02)
        victim.send_signal(signal.SIGKILL)

    async def _until_completed(db: Any, n: int, children: list[subprocess.Popen[str]], timeout: float) -> None:
        """Wait for `n` completed threads; on timeout, say where each thread is and what the workers logged."""
        try:
            async with asyncio.timeout(timeout):
                while await _completed(db) < n:
                    await asyncio.sleep(0.1)
        except TimeoutError:
            rows = await db.fetch("SELECT id, status FROM threads")
            logs = {c.pid: Path(c.log_path).read_text()[-3000:] for c in children}  # type: ignore[attr-defined]
            raise AssertionError(f"threads: {[(r['id'], r['status']) for r in rows]}; worker logs: {logs}") from None

    async def _completed(db: Any) -> int:
        return int(await db.fetchval("SELECT COUNT(*) FROM threads WHERE status = 'completed'"))

    @pytest.fixture
    async def shared(pg_schema: str) -> Any:
        """(storage, db connection with a tool_runs table, Temporal address, task queue)."""
        import asyncpg
        from temporal_support import dev_server

        from orchestrator.storage.postgres import PostgresStorage

        storage = PostgresStorage(PG_DSN, schema=pg_schema)
        await storage.open()  # migrates
        db = await asyncpg.connect(PG_DSN, server_settings={"search_path": pg_schema})
        await db.execute(
            "CREATE TABLE tool_runs (thread_id TEXT, call_id TEXT, started_at DOUBLE PRECISION, pid INTEGER)"
        )
        try:
            yield storage, db, dev_server().address, f"mp-{uuid.uuid4().hex[:12]}"
        finally:
            await db.close()
            await storage.close()

    async def test_temporal_three_workers_one_killed_every_thread_completes_once(
        shared: Any, pg_schema: str, redis_prefix: str, tmp_path: Path
    ) -> None:
        import httpx

        storage, db, address, task_queue = shared
        children: list[subprocess.Popen[str]] = []
        try:
            server, where = _spawn(tmp_path, "server", pg_schema, redis_prefix, address, task_queue)
            children.append(server)
            for i in range(N_WORKERS):
                children.append(_spawn(tmp_path, "worker", pg_schema, redis_prefix, address, task_queue, f"w{i}")[0])
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
                killer = asyncio.create_task(_kill_when_busy(db, workers[0]))  # while requests still arrive
                lanes = asyncio.Semaphore(8)

                async def run(thread_id: str) -> None:
                    async with lanes:  # answered only once Temporal stored the request
                        assert (await http.post(f"/threads/{thread_id}/run")).status_code == 202

                await asyncio.gather(*(run(t) for t in ids))
            async with asyncio.timeout(200):
                await killer
                seen = dict(zip(watchers, await asyncio.gather(*watchers.values()), strict=True))
                while await _completed(db) < N_THREADS:
                    await asyncio.sleep(0.1)
            elapsed = time.monotonic() - started
            await _check(storage, db, ids, seen)
            print(f"\n{N_THREADS} threads, {N_WORKERS} workers on Temporal (one killed): {elapsed:.1f}s")
        finally:
            _stop_all(children)

    async def test_temporal_a_stalled_worker_is_fenced_out_and_nothing_is_duplicated(
        shared: Any, pg_schema: str, redis_prefix: str, tmp_path: Path
    ) -> None:
        storage, db, address, task_queue = shared
        from orchestrator.core.messages import ThreadRecord
        from orchestrator.temporal import ThreadRequests, connect

        slow = {"ORCH_TEST_TOOL_DELAY": "1.0"}  # tools outlast the stall's start, so it lands mid-call
        stalled, _ = _spawn(tmp_path, "worker", pg_schema, redis_prefix, address, task_queue, "s0", env=slow)
        children = [stalled]
        try:
            options = _options(address, task_queue)
            requests = ThreadRequests(await connect(options), options)
            ids = [(await storage.create_thread(ThreadRecord(agent_id="duo"))).id for _ in range(6)]
            for t in ids:
                await requests.submit(t, None, last_flow=None)
            async with asyncio.timeout(30):
                while not await db.fetchval("SELECT COUNT(*) FROM tool_runs WHERE pid = $1", stalled.pid):
                    await asyncio.sleep(0.02)
            stalled.send_signal(signal.SIGSTOP)
            children.append(_spawn(tmp_path, "worker", pg_schema, redis_prefix, address, task_queue, "s1", env=slow)[0])
            await _until_completed(db, len(ids), children, timeout=150)
            stalled.send_signal(signal.SIGCONT)  # it wakes up believing it still runs its threads
            await asyncio.sleep(HEARTBEAT_TIMEOUT + 1.0)  # time for its late writes, which must be refused
            for t in ids:
                record = await storage.get_thread(t)
                assert record.status == "completed", (t, record.status)
                messages = (await storage.get_messages(t, include_silent=True)).messages
                assert shape(messages) == DUO_SHAPE, (t, shape(messages))  # nothing stored twice
                stored = await storage.events_after(t, 0)
                assert [e.type for e in stored].count("execution_stopped") == 1, (t, [e.type for e in stored])
            moved = await db.fetchval("SELECT COUNT(DISTINCT thread_id) FROM tool_runs WHERE pid <> $1", stalled.pid)
            assert moved > 0  # the other worker took threads the stalled one held
        finally:
            _stop_all(children)
        late = Path(stalled.log_path).read_text()  # type: ignore[attr-defined]
        assert "temporal_attempt_abandoned" in late  # once awake, it stood down instead of finishing its threads

    async def _check(storage: Any, db: Any, ids: list[str], seen: dict[str, list[dict[str, Any]]]) -> None:
        resumed = 0
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
            starts = [e.data for e in stored if e.type == "execution_started"]
            assert len({s["flow_id"] for s in starts}) == 1, (
                t,
                starts,
            )  # one execution, perhaps resumed: completed once
            resumed += any(s["resumed"] for s in starts)
            announced = [e["data"]["id"] for e in events if e["type"] in ("message_created", "tool_result")]
            assert sorted(announced) == sorted(m.id for m in messages), t
        per_worker = {
            r["pid"]: (r["n"], r["last"])
            for r in await db.fetch("SELECT pid, COUNT(*) AS n, MAX(started_at) AS last FROM tool_runs GROUP BY pid")
        }
        assert resumed > 0, (
            f"the killed worker held no execution: the test proved nothing (tool runs per worker: {per_worker})"
        )


if __name__ == "__main__":
    _child_main(sys.argv[1:])

"""WebSocket fan-out under load: 200 clients on 50 threads of a local server.

    .venv/bin/python bench/ws_load.py [--threads 50] [--clients-per-thread 4]

Starts `orchestrator serve --scripted demo` as a subprocess on a free
127.0.0.1 port (the built-in stateless script, so every thread runs the
`support_demo` conversation), connects all clients before starting the runs,
starts every run at once, and waits for each client to see
`execution_stopped`. Reports delivered events per second, delivery latency
(client receive time minus the event's `at`, same machine clock) and whether
every client received every event of its thread exactly once, in order.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http(method: str, url: str, body: Any = None, timeout: float = 60) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def _start_server(port: int, db: Path) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.server.cli",
        "--scripted",
        "demo",
        "--port",
        str(port),
        "--db",
        str(db),
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "ORCHESTRATOR_TOKENS": ""}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            _http("GET", f"http://127.0.0.1:{port}/agents", timeout=2)
            return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start within 60 s")


async def _client(url: str, received: list[tuple[int, str, float]], ready: asyncio.Event) -> None:
    from websockets.asyncio.client import connect

    async with connect(url, max_size=2**20, open_timeout=30) as ws:
        ready.set()
        async for frame in ws:
            event = json.loads(frame)
            received.append((event["seq"], event["type"], time.time() - event["at"]))
            if event["type"] in ("execution_stopped", "execution_failed"):
                return


async def _load(base: str, threads: int, per_thread: int) -> dict[str, Any]:
    ids = [_http("POST", f"{base}/threads", {"agent": "support_demo"})["id"] for _ in range(threads)]
    clients: list[tuple[str, list[tuple[int, str, float]]]] = []
    tasks, readies = [], []
    for tid in ids:
        for _ in range(per_thread):
            received: list[tuple[int, str, float]] = []
            ready = asyncio.Event()
            clients.append((tid, received))
            readies.append(ready)
            tasks.append(
                asyncio.create_task(
                    _client(f"{base.replace('http', 'ws', 1)}/threads/{tid}/events?after=0", received, ready)
                )
            )
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
    started = time.perf_counter()
    await asyncio.gather(*(asyncio.to_thread(_http, "POST", f"{base}/threads/{tid}/run") for tid in ids))
    await asyncio.wait_for(asyncio.gather(*tasks), 300)
    elapsed = time.perf_counter() - started
    return _summary(clients, threads, per_thread, elapsed)


def _summary(
    clients: list[tuple[str, list[tuple[int, str, float]]]], threads: int, per_thread: int, elapsed: float
) -> dict[str, Any]:
    problems: list[str] = []
    by_thread: dict[str, list[int]] = {}
    for tid, received in clients:
        seqs = [s for s, _, _ in received]
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append(f"{tid}: gaps, duplicates or disorder ({len(seqs)} events)")
        if by_thread.setdefault(tid, seqs) != seqs:
            problems.append(f"{tid}: clients of one thread saw different events")
    latencies = sorted(lat * 1000 for _, received in clients for _, _, lat in received)
    delivered = len(latencies)
    distinct = sum(len(seqs) for seqs in by_thread.values())
    return {
        "threads": threads,
        "clients": threads * per_thread,
        "seconds": round(elapsed, 3),
        "events_per_thread": round(distinct / threads, 1),
        "events_delivered": delivered,
        "delivered_per_second": round(delivered / elapsed),
        "distinct_events_per_second": round(distinct / elapsed),
        "latency_ms_p50": round(statistics.median(latencies), 2),
        "latency_ms_p99": round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 2),
        "latency_ms_max": round(latencies[-1], 2),
        "every_client_every_event_once": not problems,
        "problems": problems[:10],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=50)
    parser.add_argument("--clients-per-thread", type=int, default=4)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = _start_server(port, Path(tmp) / "bench.db")
        try:
            base = f"http://127.0.0.1:{port}"
            warm = _http("POST", f"{base}/threads", {"agent": "support_demo"})["id"]
            _http("POST", f"{base}/threads/{warm}/run?wait=true")  # first model call imports LiteLLM
            result = asyncio.run(_load(base, args.threads, args.clients_per_thread))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(json.dumps(result, indent=2))
    return 0 if result["every_client_every_event_once"] else 1


if __name__ == "__main__":
    sys.exit(main())

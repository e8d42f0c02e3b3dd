"""The comparison suite: this runtime against the frameworks users would pick.

    python -m bench            # full run (about 10 minutes on a quiet machine, see docs/performance.md)
    python -m bench --quick    # a smoke run (about 6 minutes on 2 cores)

Starts the fake provider (bench/fake_provider.py) in its own process and one
worker process per contender (bench/worker.py), then measures every contender
side by side in interleaved rounds, so machine noise hits all of them alike.
Prints a markdown table with pass/fail per target and saves, under
bench/results/ (gitignored): results.md, results.json, bench.png, profiles and
worker logs. Peer frameworks come from the `bench` extra:
`pip install -e .[bench]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
sys.path.insert(0, str(ROOT))

from bench.contenders import CONTENDERS, LABELS, PROVIDER_CONTENDERS  # noqa: E402
from bench.fake_provider import model_name, progress_value  # noqa: E402


@dataclass
class Plan:
    rounds: int = 8
    repeats: dict[str, int] = field(default_factory=lambda: {"a": 3, "b": 2, "c": 1})
    progress_bytes: int = 100_000
    levels: tuple[int, ...] = (1, 10, 100, 1000)
    load_contenders: tuple[str, ...] = (
        "runtime",
        "runtime_litellm",
        "litellm",
        "openai",
        "agents_native",
        "pydantic_ai",
        "agents_litellm",
    )
    # The 1,000 level is long: the runtime and the two floors (a bare LiteLLM loop; the openai SDK, the
    # fewest objects per request in flight, so the shortest full-collection pause any loop here can have).
    big_level_contenders: tuple[str, ...] = ("runtime", "litellm", "openai")
    idle_threads: int = 1000
    running_conversations: int = 100


def quick_plan() -> Plan:
    return Plan(
        rounds=3,
        repeats={"a": 2, "b": 2, "c": 1},
        progress_bytes=20_000,
        levels=(1, 10, 100),
        load_contenders=("runtime", "litellm", "agents_native"),
        idle_threads=300,
        running_conversations=50,
    )


# -- processes -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def fake_server() -> Any:
    port = _free_port()
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)  # bench/results is not in git
    log = open(RESULTS / "logs" / "fake_provider.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.fake_provider", "--port", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                server_stats(url)
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("the fake provider did not start: see bench/results/logs/fake_provider.log")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def server_stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/stats", timeout=5) as response:
        return json.loads(response.read())


class Worker:
    """One contender's process; `call` sends a command and waits for its answer."""

    def __init__(self, key: str, url: str, *, tag: str = "") -> None:
        self.key = key
        (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
        self.log = open(RESULTS / "logs" / f"worker_{key}{tag}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker", key, "--base-url", url],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def ready(self) -> dict[str, Any]:
        return self._read()

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        self.send(op, **args)
        return self.answer(op)

    def send(self, op: str, **args: Any) -> None:
        """Send a command without waiting (several workers then run at once); `answer` reads its reply."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()

    def answer(self, op: str) -> dict[str, Any]:
        answer = self._read()
        if not answer.get("ok", True):
            raise RuntimeError(f"{self.key}: {op} failed: {answer.get('error')} (log: {self.log.name})")
        return answer

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.key} exited (code {self.proc.poll()}); see {self.log.name}")
        return json.loads(line)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call_quit()
                self.proc.wait(30)
        except Exception:
            self.proc.kill()
        self.log.close()

    def call_quit(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write('{"op": "quit"}\n')
        self.proc.stdin.flush()


def start_workers(keys: list[str], url: str) -> dict[str, Worker]:
    workers = {key: Worker(key, url) for key in keys}  # imports run in parallel
    for worker in workers.values():
        worker.ready()
    return workers


# -- phases ------------------------------------------------------------------------


def scenario_models(plan: Plan) -> dict[str, str]:
    return {
        "a": model_name("a", chunks=50),
        "b": model_name("b", chunks=20),
        "c": model_name("c", chunks=20),
        "d": model_name("d", bytes=plan.progress_bytes, size=10),
    }


def run_scenarios(workers: dict[str, Worker], plan: Plan, log: Any) -> dict[str, Any]:
    models = scenario_models(plan)
    out: dict[str, dict[str, Any]] = {s: {k: {"wall": [], "cpu": [], "steps": 0} for k in workers} for s in models}
    for key, worker in workers.items():  # warm-up: lazy imports, connection pools, caches
        for scenario in _scenarios(key, "abc"):
            worker.call("conv", scenario=scenario, model=models[scenario], repeat=2)
        if key not in PROVIDER_CONTENDERS:
            worker.call("conv", scenario="d", model=model_name("d", bytes=2000, size=10), repeat=1)
    for round_ in range(plan.rounds):
        for scenario in "abc":
            if scenario == "c" and round_ % 2:
                continue
            order = [key for key in workers if scenario in _scenarios(key, "abc")]
            random.shuffle(order)
            for key in order:
                _merge(
                    out[scenario][key],
                    workers[key].call("conv", scenario=scenario, model=models[scenario], repeat=plan.repeats[scenario]),
                )
        log(f"  round {round_ + 1}/{plan.rounds} done")
    for key, worker in workers.items():
        if key in PROVIDER_CONTENDERS:
            continue
        _merge(out["d"][key], worker.call("conv", scenario="d", model=models["d"], repeat=1))
        log(f"  scenario d ({plan.progress_bytes} B in 10-byte deltas): {LABELS[key]} done")
    return out


def _scenarios(key: str, wanted: str) -> str:
    """Anthropic and Gemini contenders run (b) and (c): tool calls, and many requests per conversation."""
    return "".join(s for s in wanted if s in "bc") if key in PROVIDER_CONTENDERS else wanted


def run_own(workers: dict[str, Worker], plan: Plan, log: Any) -> dict[str, Any] | None:
    """The runtime's own cost: scenarios a-c with the model replayed (no HTTP, no parsing)."""
    if "runtime" not in workers:
        return None
    models = scenario_models(plan)
    out: dict[str, Any] = {}
    for scenario in "abc":
        own = out[scenario] = {"wall": [], "cpu": [], "steps": 0}
        for _ in range(plan.rounds):
            _merge(
                own,
                workers["runtime"].call(
                    "conv", scenario=scenario, model=models[scenario], repeat=plan.repeats[scenario], stubbed=True
                ),
            )
    log("  runtime with the model stubbed done")
    return out


def _merge(into: dict[str, Any], answer: dict[str, Any]) -> None:
    into["wall"] += answer["wall"]
    into["cpu"] += answer["cpu"]
    into["steps"] = answer["steps"]


def run_load(workers: dict[str, Worker], url: str, plan: Plan, log: Any) -> dict[str, Any]:
    model = model_name("a", chunks=50, latency=50)
    out: dict[str, list[dict[str, Any]]] = {}
    for key in plan.load_contenders:
        if key not in workers:
            continue
        out[key] = []
        for level in plan.levels:
            if level >= 1000 and key not in plan.big_level_contenders:
                continue
            total = _load_total(level)
            before = server_stats(url)
            answer = workers[key].call("load", model=model, concurrency=level, total=total)
            after = server_stats(url)
            answer.update(
                level=level,
                total=total,
                server_cpu=after["cpu"] - before["cpu"],
                server_requests=after["requests"] - before["requests"],
            )
            out[key].append(answer)
            log(f"  load {LABELS[key]} x{level}: {total / answer['wall']:.1f} conv/s")
    return out


def run_gc_comparison(url: str, plan: Plan, log: Any) -> list[dict[str, Any]]:
    """The same load on fresh workers, each warmed up alike, at 100 and at 1,000 at once: the runtime
    as shipped (`gc.freeze()` at open, full collections deferred while executions run), with
    `gc_defer_full` off, with both off (CPython's collector untouched), and the floor: a bare openai SDK
    loop (the fewest tracked objects per request in flight of any contender) with its heap frozen the
    same way. Above 100, also the runtime as shipped on five times the conversations in a process that
    never goes idle (the deferred collection comes then), and the load over processes of 100."""
    model = model_name("a", chunks=50, latency=50)
    out = []
    for level in [lvl for lvl in plan.levels if lvl >= 100]:
        row: dict[str, Any] = {"level": level}
        variants = [("frozen", "runtime"), ("nodefer", "runtime_nodefer"), ("plain", "runtime_nofreeze")]
        variants += [("floor", "openai")] + ([("busy", "runtime")] if level > _PER_PROCESS else [])
        for label, key in variants:
            worker = Worker(key, url, tag="_gc")
            try:
                worker.ready()
                worker.call("conv", scenario="a", model=model_name("a", chunks=50), repeat=3)
                worker.call("load", model=model, concurrency=min(level, 100), total=min(level, 100))
                if label == "floor":
                    worker.call("freeze")
                if label == "busy":
                    worker.call("never_idle")
                total = _load_total(level) * (5 if label == "busy" else 1)
                row[label] = worker.call("load", model=model, concurrency=level, total=total)
            finally:
                worker.close()
        if level > _PER_PROCESS:
            row["spread"] = _spread_load(url, level, model)
        out.append(row)
        log(f"  gc comparison at {level} done")
    return out


_PER_PROCESS = 100  # conversations per worker process in the spread variant


def _spread_load(url: str, level: int, model: str) -> dict[str, Any]:
    """The same load split over processes of 100 conversations each, the way worker processes
    (`orchestrator worker`, docs/deployment.md) would hold it: a full collection walks one
    process's heap, so its pause shrinks with the conversations each process holds."""
    workers = [Worker("runtime", url, tag=f"_gc_spread{i}") for i in range(level // _PER_PROCESS)]
    try:
        for worker in workers:
            worker.ready()
        for worker in workers:  # warmed up like the single-process variants
            worker.call("conv", scenario="a", model=model_name("a", chunks=50), repeat=3)
            worker.call("load", model=model, concurrency=_PER_PROCESS, total=_PER_PROCESS)
        total = _load_total(level) // len(workers)
        start = time.perf_counter()
        for worker in workers:
            worker.send("load", model=model, concurrency=_PER_PROCESS, total=total)
        answers = [worker.answer("load") for worker in workers]
        wall = time.perf_counter() - start
    finally:
        for worker in workers:
            worker.close()
    return {
        "processes": len(workers),
        "wall": wall,
        "total": total * len(workers),
        "latencies": [lat for a in answers for lat in a["latencies"]],
        "errors": sum(a["errors"] for a in answers),
        "gc_full": sum(a["gc_full"] for a in answers),
        "gc_max_pause": max(a["gc_max_pause"] for a in answers),
        "gc_max_pause_cpu": max(a["gc_max_pause_cpu"] for a in answers),
    }


def _load_total(level: int) -> int:
    """Conversations per load run: enough waves that synchronised starts average out."""
    return max(100, 2 * level)


def run_memory(workers: dict[str, Worker], plan: Plan, log: Any) -> dict[str, Any]:
    model = model_name("a", chunks=50, latency=2000)
    running = {
        key: w.call("mem_running", model=model, n=plan.running_conversations, settle=1.2)
        for key, w in workers.items()
        if key not in PROVIDER_CONTENDERS
    }
    idle = workers["runtime"].call("mem_idle", n=plan.idle_threads) if "runtime" in workers else None
    log("  memory done")
    return {"running": running, "idle": idle}


def run_progress(workers: dict[str, Worker], plan: Plan, log: Any) -> dict[str, Any] | None:
    """Runtime only: 1 call of N bytes vs 10 calls of N/10; closing delta -> tool_call_started."""
    if "runtime" not in workers:
        return None
    out = {}
    for calls, size in ((1, plan.progress_bytes), (10, plan.progress_bytes // 10)):
        closing = len('{"query": ') + len(json.dumps(progress_value(size))) - 1
        out[f"{calls}x{size}"] = workers["runtime"].call(
            "progress", model=model_name("d", bytes=size, size=10, calls=calls), closing_at=closing
        )
    log("  progress done")
    return out


def run_profiles(workers: dict[str, Worker], plan: Plan, log: Any) -> dict[str, str]:
    models = scenario_models(plan)
    out = {}
    for key, scenario, repeat in (
        ("runtime", "c", 1),
        ("runtime", "b", 5),
        ("litellm", "c", 1),
        ("runtime_anthropic", "b", 5),
        ("runtime_gemini", "b", 5),
        ("runtime_litellm", "b", 5),
    ):
        if key in workers:
            path = RESULTS / f"profile_{key}_{scenario}.txt"
            out[f"{key}_{scenario}"] = workers[key].call(
                "profile", scenario=scenario, model=models[scenario], repeat=repeat, path=str(path)
            )["text"]
    log("  profiles done")
    return out


def cold_start() -> dict[str, Any]:
    """`orchestrator --help` and the README demo, timed from process start."""
    exe = Path(sys.executable).with_name("orchestrator")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "orchestrator.cli.main"]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    helps = []
    for _ in range(5):
        start = time.perf_counter()
        done = subprocess.run([*command, "--help"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        helps.append(time.perf_counter() - start)
    out: dict[str, Any] = {"help": helps, "help_ok": done.returncode == 0, "demo": None, "demo_note": None}
    out["imports"] = _help_imports(env)
    if " run " not in done.stdout:
        out["demo_note"] = "`orchestrator run` does not exist yet"
        return out
    start = time.perf_counter()
    demo = subprocess.run(
        [*command, "run", "support_demo"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    out["demo"] = time.perf_counter() - start
    out["demo_note"] = (
        None if demo.returncode == 0 else f"exit {demo.returncode}: {(demo.stderr or demo.stdout)[-300:]}"
    )
    return out


def _help_imports(env: dict[str, str]) -> list[tuple[str, float]]:
    """The heaviest imports `orchestrator --help` pays for (python -X importtime)."""
    code = (
        "import sys; sys.argv = ['orchestrator', '--help']\n"
        "from orchestrator.cli.main import main\ntry: main()\nexcept SystemExit: pass"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("   "):
            rows.append((parts[2].strip(), int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:6]


def progress_micro() -> dict[str, Any]:
    """bench/progress.py: the scanner alone, 1 MB vs ten 100 KB (its exit code is the verdict)."""
    script = ROOT / "bench" / "progress.py"
    if not script.exists():
        return {"ok": None, "output": "bench/progress.py missing"}
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    return {"ok": done.returncode == 0, "output": (done.stdout.strip() or done.stderr.strip())[-1500:]}


def parse_micro(quick: bool) -> dict[str, Any]:
    """bench/parse.py: CPU per chunk and per request, per provider and stream path (no sockets)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "parse.py"), "--rounds", "3" if quick else "7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return {"ok": done.returncode == 0, "output": (done.stdout.strip() or done.stderr.strip())[-3000:]}


# -- main ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Benchmark this runtime against peer frameworks on a fake loopback provider."
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer rounds, smaller sizes, levels up to 100 (about 6 min on 2 cores)"
    )
    parser.add_argument(
        "--contenders", default=",".join(CONTENDERS), help=f"comma-separated subset of {','.join(CONTENDERS)}"
    )
    parser.add_argument(
        "--progress-bytes",
        type=int,
        help="size of scenario d's progress argument (default 100000; the issue's full size is 1000000, "
        "~2 min per LiteLLM-based contender)",
    )
    parser.add_argument("--skip-load", action="store_true", help="skip the concurrency, gc and memory phases")
    args = parser.parse_args(argv)
    plan = quick_plan() if args.quick else Plan()
    if args.progress_bytes:
        plan.progress_bytes = args.progress_bytes
    keys = [k.strip() for k in args.contenders.split(",") if k.strip()]
    unknown = set(keys) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; known: {', '.join(CONTENDERS)}")
    (RESULTS / "logs").mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {message}", file=sys.stderr, flush=True)

    from bench.report import machine, write_report

    results: dict[str, Any] = {"machine": machine(), "quick": args.quick, "plan": plan.__dict__, "contenders": keys}
    with fake_server() as url:
        log(f"fake provider at {url}; starting {len(keys)} workers")
        workers = start_workers(keys, url)
        try:
            log("scenarios a-d")
            results["scenarios"] = run_scenarios(workers, plan, log)
            results["own"] = run_own(workers, plan, log)
            results["progress"] = run_progress(workers, plan, log)
            if not args.skip_load:
                log("concurrency")
                results["load"] = run_load(workers, url, plan, log)
                if "runtime" in results["load"]:
                    results["gc"] = run_gc_comparison(url, plan, log)
                results["memory"] = run_memory(workers, plan, log)
            results["profiles"] = run_profiles(workers, plan, log)
            results["server"] = server_stats(url)
        finally:
            for worker in workers.values():
                worker.close()
    log("cold start")
    results["cold"] = cold_start()
    results["progress_micro"] = progress_micro()
    log("parse cost per chunk")
    results["parse_micro"] = parse_micro(args.quick)
    results["elapsed"] = time.perf_counter() - began
    print(write_report(results, RESULTS))
    log(f"done; results in {RESULTS}")


if __name__ == "__main__":
    main()

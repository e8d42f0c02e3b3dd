"""Turn the suite's raw numbers into the markdown report, the verdicts and the chart."""

from __future__ import annotations

import json
import os
import platform
import statistics
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.contenders import LABELS

_VERSIONS = ("litellm", "openai", "openai-agents", "pydantic-ai-slim", "httpx", "aiohttp")
_FLOORS = {
    "runtime_anthropic": "litellm_anthropic",
    "runtime_anthropic_litellm": "litellm_anthropic",
    "litellm_anthropic": "litellm_anthropic",
    "runtime_gemini": "litellm_gemini",
    "runtime_gemini_litellm": "litellm_gemini",
    "litellm_gemini": "litellm_gemini",
}
_WIRES = (
    ("OpenAI", "runtime", "runtime_litellm", "litellm"),
    ("Anthropic", "runtime_anthropic", "runtime_anthropic_litellm", "litellm_anthropic"),
    ("Gemini", "runtime_gemini", "runtime_gemini_litellm", "litellm_gemini"),
)
_REFERENCE_B = {
    "openai": 30,
    "litellm": 100,
    "agents_litellm": 111,
    "agents_native": 46,
    "pydantic_ai": 76,
}  # ms, independent run


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for name in _VERSIONS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "-"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": platform.platform(),
        "versions": versions,
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else "PASS" if ok else "FAIL"


# -- tables -------------------------------------------------------------------------


def _scenario_table(scenarios: dict[str, Any]) -> list[str]:
    lines = [
        "| scenario | contender | steps | wall/conv ms, median (min-max) | CPU/conv ms | wall/step ms | CPU/step ms | x bare litellm loop, same wire (wall) | x this runtime, OpenAI wire reader (wall) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, rows in scenarios.items():
        ours = _med(rows.get("runtime", {}).get("wall", []))
        for key, row in sorted(rows.items(), key=lambda kv: _med(kv[1]["wall"]) if kv[1]["wall"] else float("inf")):
            if not row["wall"]:
                continue
            floor = _med(rows.get(_FLOORS.get(key, "litellm"), {}).get("wall", []))  # the bare loop on the same wire
            wall, cpu, steps = _med(row["wall"]), _med(row["cpu"]), max(1, row["steps"])
            lines.append(
                f"| {scenario} | {LABELS[key]} | {row['steps']} | {_ms(wall)} ({_ms(min(row['wall']))}-{_ms(max(row['wall']))}) | {_ms(cpu)} "
                f"| {_ms(wall / steps)} | {_ms(cpu / steps)} | {wall / floor:.2f} | {wall / ours:.2f} |"
            )
    return lines


def _load_table(load: dict[str, Any]) -> list[str]:
    lines = [
        "| contender | concurrent | conversations | conv/s | p50 step ms | p99 step ms | CPU busy | server CPU | full GCs (max pause ms) | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, runs in load.items():
        for r in runs:
            lat = r["latencies"]
            lines.append(
                f"| {LABELS[key]} | {r['level']} | {r['total']} | {r['total'] / r['wall']:.1f} | {_ms(_pct(lat, 0.5))} | {_ms(_pct(lat, 0.99))} "
                f"| {r['cpu'] / r['wall']:.0%} | {r['server_cpu'] / r['wall']:.0%} | {r['gc_full']} ({_ms(r['gc_max_pause'])}) | {r['errors']} |"
            )
    return lines


def _scaling(runs: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    """(level, throughput, efficiency) where the ideal is min(N x single-lane rate, 1 / CPU per conversation)."""
    if not runs:
        return []
    first = runs[0]
    lane_rate = first["total"] / first["wall"]
    capacity = first["total"] / first["cpu"]
    out = []
    for r in runs:
        rate = r["total"] / r["wall"]
        out.append((r["level"], rate, rate / min(r["level"] * lane_rate, capacity)))
    return out


# -- targets -------------------------------------------------------------------------


def _targets(results: dict[str, Any]) -> list[str]:
    sc = results["scenarios"]
    rows = ["| target | measured | verdict |", "|---|---|---|"]
    rows += _overhead_targets(results)
    rows += _provider_targets(sc)
    rows += _own_work_targets(results)
    rows += _peer_targets(sc)
    if results.get("load", {}).get("runtime"):
        scaling = _scaling(results["load"]["runtime"])
        text = ", ".join(f"x{lvl}: {rate:.1f}/s ({eff:.0%})" for lvl, rate, eff in scaling)
        rows.append(
            f"| linear scaling to 1,000 until CPU-bound (efficiency >= 80%) | {text} | {_verdict(all(e >= 0.8 for _, _, e in scaling))} |"
        )
    idle = (results.get("memory") or {}).get("idle")
    if idle:
        rows.append(
            f"| memory per idle thread < 50 KB | RSS {idle['rss_per_thread'] / 1024:.1f} KB, Python heap {idle['heap_per_thread'] / 1024:.1f} KB | {_verdict(idle['rss_per_thread'] < 50 * 1024)} |"
        )
    rows += _progress_targets(results)
    rows += _cold_targets(results["cold"])
    for gc in results.get("gc") or []:
        rows.append(_gc_target(gc, results["gc"]))
        if busy := gc.get("busy"):
            rows.append(_busy_row(gc["level"], busy))
        if spread := gc.get("spread"):
            rows.append(_spread_row(gc["level"], spread, results["gc"]))
    return rows


def _per_step(sc: dict[str, Any], scenario: str, key: str, field: str = "wall") -> float:
    row = sc[scenario].get(key)
    return _med(row[field]) / max(1, row["steps"]) if row and row[field] else float("nan")


def _overhead_targets(results: dict[str, Any]) -> list[str]:
    sc, rows = results["scenarios"], []
    for scenario in "ab":
        ratio = _per_step(sc, scenario, "runtime") / _per_step(sc, scenario, "litellm")
        cpu = _per_step(sc, scenario, "runtime", "cpu") / _per_step(sc, scenario, "litellm", "cpu")
        rows.append(
            f"| overhead over bare LiteLLM loop <= 10% per step, ({scenario}), as shipped | wall x{ratio:.2f}, CPU x{cpu:.2f} | {_verdict(ratio <= 1.10)} |"
        )
    return rows


def _own_work_targets(results: dict[str, Any]) -> list[str]:
    sc, own, rows = results["scenarios"], results.get("own") or {}, []
    for scenario in "ab":
        if scenario not in own:
            continue
        per_step = _med(own[scenario]["cpu"]) / max(1, own[scenario]["steps"])
        share = per_step / _per_step(sc, scenario, "litellm", "cpu")
        text = f"{_ms(per_step)} ms CPU per step = {share:.0%} of a bare LiteLLM step"
        if "runtime_litellm" in sc[scenario]:
            text += f"; `stream: litellm` end to end: x{_per_step(sc, scenario, 'runtime_litellm') / _per_step(sc, scenario, 'litellm'):.2f} wall"
        rows.append(
            f"| the runtime's own work (model replayed, no HTTP) <= 10% of a bare LiteLLM step, ({scenario}) | {text} | {_verdict(share <= 0.10)} |"
        )
    return rows


def _peer_targets(sc: dict[str, Any]) -> list[str]:
    rows = []
    for scenario in "bc":
        ours = _med(sc[scenario]["runtime"]["wall"]) if "runtime" in sc[scenario] else float("nan")
        peers = {
            k: ours / _med(sc[scenario][k]["wall"])
            for k in ("agents_litellm", "agents_native", "pydantic_ai")
            if k in sc[scenario]
        }
        text = ", ".join(f"x{v:.2f} vs {LABELS[k]}" for k, v in peers.items())
        ok = peers["agents_litellm"] < 1.0 if "agents_litellm" in peers else None
        rows.append(f"| faster per conversation than Agents SDK + LiteLLM ({scenario}) | {text} | {_verdict(ok)} |")
    if "pydantic_ai" in sc["b"] and "runtime" in sc["b"]:
        ratio = _med(sc["b"]["runtime"]["wall"]) / _med(sc["b"]["pydantic_ai"]["wall"])
        floor = _med(sc["b"]["runtime"]["wall"]) / _med(sc["b"]["litellm"]["wall"])
        rows.append(
            f"| stretch: beat PydanticAI per conversation in (b), OpenAI wire reader | x{ratio:.2f} vs PydanticAI, x{floor:.2f} vs bare LiteLLM loop | {_verdict(ratio < 1.0)} |"
        )
    return rows


def _cold_targets(cold: dict[str, Any]) -> list[str]:
    help_s = _med(cold["help"])
    demo = f"{cold['demo']:.2f} s" if cold["demo"] is not None else "-"
    return [
        f"| `orchestrator --help` < 0.3 s | {help_s:.3f} s median | {_verdict(help_s < 0.3 and cold['help_ok'])} |",
        f"| README demo `orchestrator run support_demo` (no target) | {demo} {cold['demo_note'] or ''} | {_verdict(None if cold['demo'] is None else cold['demo_note'] is None)} |",
    ]


_GC_VARIANTS = {
    "frozen": "as shipped (gc.freeze at open, full GCs deferred while executions run)",
    "nodefer": "`gc_defer_full` off",
    "plain": "`gc_freeze` and `gc_defer_full` off",
    "floor": "floor, bare openai SDK loop with its heap frozen",
}


def _gc_target(gc: dict[str, Any], all_gc: list[dict[str, Any]]) -> str:
    frozen = gc["frozen"]
    text = "; ".join(
        f"{label}: p99 {_ms(_pct(gc[key]['latencies'], 0.99))} ms, {gc[key]['gc_full']} full GCs, "
        f"max pause {_ms(gc[key]['gc_max_pause'])} ms"
        for key, label in _GC_VARIANTS.items()
        if key in gc
    )
    text = f"x{gc['level']}: {text}"
    ok = frozen["gc_max_pause"] <= 0.05
    if gc["level"] > 100 and (x100 := next((g["frozen"] for g in all_gc if g["level"] == 100), None)):
        rate, base = _rate(frozen), _rate(x100)
        text += f"; as shipped {rate:.1f} conv/s against {base:.1f} at x100"
        ok = ok and rate >= base
    target = "no GC spikes (full-collection pause <= 50 ms, runtime as shipped"
    target += ", throughput >= x100)" if gc["level"] > 100 else ")"
    return f"| {target}, x{gc['level']} | {text} | {_verdict(ok)} |"


def _busy_row(level: int, busy: dict[str, Any]) -> str:
    """The deferred full collection's own pause: a process that never goes idle runs it at last."""
    text = (
        f"{len(busy['latencies'])} conversations, {busy['gc_full']} full GCs, max pause "
        f"{_ms(busy['gc_max_pause'])} ms (collector CPU {_ms(busy['gc_max_pause_cpu'])} ms); "
        f"{_rate(busy):.1f} conv/s; {busy['errors']} errors"
    )
    ok = busy["gc_max_pause"] <= 0.05 and not busy["errors"]
    return f"| no GC spikes at x{level} in a process that never goes idle (pause <= 50 ms) | {text} | {_verdict(ok)} |"


def _rate(load: dict[str, Any]) -> float:
    """Conversations per second of one load run."""
    return len(load["latencies"]) / load["wall"]


def _spread_row(level: int, spread: dict[str, Any], gc_rows: list[dict[str, Any]]) -> str:
    """x1000 held by worker processes of 100 each: pause and throughput against one process at x100."""
    x100 = next((g["frozen"] for g in gc_rows if g["level"] == 100), None)
    rate = _rate(spread)
    base = _rate(x100) if x100 else float("nan")
    text = (
        f"{spread['processes']} processes of {level // spread['processes']}: {spread['gc_full']} full GCs in all, "
        f"max pause {_ms(spread['gc_max_pause'])} ms (collector CPU {_ms(spread['gc_max_pause_cpu'])} ms); "
        f"{rate:.1f} conv/s against {base:.1f} at x100 in one process; {spread['errors']} errors"
    )
    ok = spread["gc_max_pause"] <= 0.05 and rate >= base and not spread["errors"]
    return f"| no GC spikes at x{level} over worker processes (pause <= 50 ms, throughput >= x100) | {text} | {_verdict(ok)} |"


def _provider_targets(sc: dict[str, Any]) -> list[str]:
    """Every provider on equal footing (issue 14): each wire reader within x1.25 of the OpenAI one in (b). Each
    `stream: litellm` path against the bare `acompletion` loop on the same route and transport (httpx) is a
    measured ratio, no longer a target: it reads x0.87-1.38 run to run on one commit, this machine's noise
    floor, and it is the fallback path (docs/performance.md)."""
    rows = []

    def wall(scenario: str, key: str) -> float:
        row = sc.get(scenario, {}).get(key)
        return _med(row["wall"]) if row and row["wall"] else float("nan")

    for scenario in "bc":
        base = wall(scenario, "runtime")
        for name, reader, _, _ in _WIRES[1:]:
            ratio = wall(scenario, reader) / base
            if ratio == ratio:  # ran
                target = "<= x1.25" if scenario == "b" else "(no target)"
                verdict = _verdict(ratio <= 1.25) if scenario == "b" else "n/a"
                rows.append(
                    f"| ({scenario}) {name} conversation, wire reader, {target} of the OpenAI wire reader | "
                    f"{_ms(wall(scenario, reader))} vs {_ms(base)} ms: x{ratio:.2f} | {verdict} |"
                )
        for name, _, litellm_path, loop in _WIRES:
            ratio = wall(scenario, litellm_path) / wall(scenario, loop)
            if ratio == ratio:
                rows.append(
                    f"| ({scenario}) {name}, `stream: litellm` (LiteLLM's stream) against the bare acompletion loop "
                    f"(no target) | {_ms(wall(scenario, litellm_path))} vs {_ms(wall(scenario, loop))} ms: "
                    f"x{ratio:.2f} | n/a |"
                )
    return rows


def _progress_targets(results: dict[str, Any]) -> list[str]:
    rows = []
    progress = results.get("progress")
    if progress:
        delays = [d for run in progress.values() for d in run["hook_delays"]]
        events = [d for run in progress.values() for d in run["event_delays"]]
        worst = max(delays + events, default=float("nan"))
        rows.append(
            f"| `tool_call_started` within 1 ms of the closing chunk | hook median {_ms(_med(delays))} / max {_ms(max(delays, default=float('nan')))} ms, "
            f"live event median {_ms(_med(events))} / max {_ms(max(events, default=float('nan')))} ms ({len(delays)} calls) | {_verdict(worst <= 0.001)} |"
        )
        (one_key, one), (ten_key, ten) = list(progress.items())
        ratio = one["wall"] / ten["wall"]
        rows.append(
            f"| progress cost linear, end to end (OpenAI wire reader): {one_key} vs {ten_key} within 2x | {_ms(one['wall'])} ms vs {_ms(ten['wall'])} ms (x{ratio:.2f}) | {_verdict(0.5 <= ratio <= 2.0)} |"
        )
    micro = results.get("progress_micro") or {}
    if micro.get("ok") is not None:
        rows.append(
            f"| progress detection alone (bench/progress.py): 1 MB vs ten 100 KB within 2x | see bench/progress.py output below | {_verdict(micro['ok'])} |"
        )
    return rows


# -- output -----------------------------------------------------------------------------


def write_report(results: dict[str, Any], out_dir: Path) -> str:
    m = results["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    lines = [
        f"# Benchmark: this runtime vs peers{' (quick)' if results['quick'] else ''}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores; Python {m['python']}; {m['system']}",
        f"Versions: {versions}. Run took {results['elapsed']:.0f} s. Fake provider on loopback (bench/fake_provider.py).",
        "",
        "Scenarios: a = one step, 50 text chunks; b = two parallel tool calls, a third, then an answer (3 requests);",
        f"c = dual_ai, 10 turns per side (20 requests); d = one tool call whose progress argument is {results['plan']['progress_bytes']:,} B in 10-byte deltas (2 requests).",
        "",
        "## Targets",
        *_targets(results),
        "",
        "## Per conversation and per step (medians of interleaved rounds)",
        *_scenario_table(results["scenarios"]),
        "",
        _reference_line(results["scenarios"]),
    ]
    if results.get("load"):
        lines += ["", "## Concurrency (scenario a, 50 ms provider latency)", *_load_table(results["load"])]
    if results.get("memory"):
        running = results["memory"]["running"]
        lines += [
            "",
            "## Memory per running conversation (while waiting on the provider)",
            "| contender | Python heap KB (tracemalloc) | RSS KB |",
            "|---|---:|---:|",
        ]
        lines += [
            f"| {LABELS[k]} | {v['heap_per_conversation'] / 1024:.1f} | {v['per_conversation'] / 1024:.1f} |"
            for k, v in sorted(running.items(), key=lambda kv: kv[1]["heap_per_conversation"])
        ]
    cold = results["cold"]
    lines += [
        "",
        "## Cold start",
        f"`orchestrator --help`: median {_med(cold['help']):.3f} s (min {min(cold['help']):.3f}); heaviest imports: "
        + ", ".join(f"{name} {sec * 1000:.0f} ms" for name, sec in cold.get("imports", [])),
    ]
    micro = results.get("progress_micro") or {}
    if micro.get("output"):
        lines += ["", "## bench/progress.py (detection alone)", "```", micro["output"], "```"]
    parse = results.get("parse_micro") or {}
    if parse.get("output"):
        lines += [
            "",
            "## Parse cost per chunk, per provider and stream path (bench/parse.py, respx, no sockets)",
            parse["output"],
        ]
    chart = _chart(results, out_dir / "bench.png")
    lines += [
        "",
        f"Chart: {chart}" if chart else "Chart: matplotlib missing, none saved",
        "Profiles: bench/results/profile_*.txt (and .html)",
    ]
    text = "\n".join(lines)
    (out_dir / "results.md").write_text(text + "\n")
    (out_dir / "results.json").write_text(
        json.dumps({k: v for k, v in results.items() if k != "profiles"}, indent=1, default=str)
    )
    return text


def _reference_line(scenarios: dict[str, Any]) -> str:
    b = scenarios.get("b", {})
    here = ", ".join(
        f"{LABELS[k]} {_ms(_med(b[k]['wall']))} (ref {ref})"
        for k, ref in _REFERENCE_B.items()
        if k in b and b[k]["wall"]
    )
    return f"Scenario b against the issue's independent reference run (ms per conversation): {here}."


def _chart(results: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    load = results.get("load") or {}
    fig, axes = plt.subplots(1, 3 if load else 1, figsize=(18 if load else 8, 5.5), squeeze=False)
    ax = axes[0][0]
    scenarios = results["scenarios"]
    keys = [k for k in results["contenders"] if any(scenarios[s].get(k, {}).get("wall") for s in scenarios)]
    width = 0.8 / max(1, len(keys))
    for i, key in enumerate(keys):
        meds, lows, highs = [], [], []
        for s in scenarios:
            row = scenarios[s].get(key) or {}
            if not row.get("wall"):  # a contender that does not run this scenario
                row = {"wall": [float("nan")], "steps": 1}
            steps = max(1, row["steps"])
            med = _med(row["wall"]) / steps * 1000
            meds.append(med)
            lows.append(med - min(row["wall"]) / steps * 1000)
            highs.append(max(row["wall"]) / steps * 1000 - med)
        ax.bar(
            [j + i * width for j in range(len(scenarios))],
            meds,
            width,
            yerr=[lows, highs],
            capsize=2,
            label=LABELS[key],
        )
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(scenarios))], [f"({s})" for s in scenarios])
    ax.set_yscale("log")
    ax.set_ylabel("wall ms per step (median, min-max)")
    ax.set_title("Per step, by scenario")
    ax.legend(fontsize=8)
    if load:
        for key, runs in load.items():
            levels = [r["level"] for r in runs]
            axes[0][1].plot(levels, [r["total"] / r["wall"] for r in runs], marker="o", label=LABELS[key])
            axes[0][2].plot(levels, [_pct(r["latencies"], 0.99) * 1000 for r in runs], marker="o", label=LABELS[key])
        for ax, title, unit in (
            (axes[0][1], "Throughput (50 ms provider latency)", "conversations/s"),
            (axes[0][2], "p99 step latency", "ms"),
        ):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("concurrent conversations")
            ax.set_ylabel(unit)
            ax.set_title(title)
            ax.legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(f"{m['cpu']}, {m['cores']} cores")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    try:
        return str(path.relative_to(Path(__file__).resolve().parents[1]))
    except ValueError:
        return str(path)

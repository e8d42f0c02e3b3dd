"""What OpenTelemetry tracing costs per conversation: a table, one process per mode.

    python bench/tracing.py [--conversations 200]

Each mode runs the same conversation (a person's message; two parallel tool
calls, one more call, an answer: scenario (b)) on the scripted model, whose
OpenAI-wire SSE bytes are served in-process by respx and read by the runtime's
wire reader. Modes, each in a fresh interpreter:

- off: the OpenTelemetry API cannot be imported (the base install): the span
  decorators are the functions themselves;
- api, no SDK: the API is installed but the host configured no provider, so
  spans are non-recording;
- sdk: a TracerProvider with an in-memory exporter records every span.

The verdict: "off" and "api, no SDK" within 5% of each other (noise on this
machine is about that), i.e. tracing that nobody collects costs nothing measurable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import asyncio, json, sys, time
mode, count = sys.argv[1], int(sys.argv[2])
if mode == "off":
    sys.modules["opentelemetry"] = None  # as if the [otel] extra were not installed
sys.path[:0] = [ROOT, ROOT + "/tests"]
import respx
from pydantic import BaseModel
from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.core import tracing
from orchestrator.runtime import Runtime
from orchestrator.core.settings import RuntimeSettings
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall as C, ScriptedModel, ScriptedResponse as R
from support import Q, definitions
if mode == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    provider = TracerProvider(); exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter)); trace.set_tracer_provider(provider)

async def lookup(state, args: Q):
    return ToolResult.ok(f"order {args.q}: shipped")

defs = definitions(
    tools={"lookup": define_tool(description="Look up", args=Q, execute=lookup)},
    prompts={"pa": define_prompt(prompt="You help.", tool_description="a", tools=("lookup",))},
    agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
)
config = config_from_dict({"providers": {"s": {"type": "scripted"}},
                           "models": {"demo": {"provider": "s", "model": "demo"}}, "default_model": "demo"})

def script():
    return [R(tool_calls=[C("lookup", {"q": "A1"}), C("lookup", {"q": "A2"})]),
            R(tool_calls=[C("lookup", {"q": "A3"})]), R(text="All shipped. " * 10)]

async def main():
    router = respx.mock(assert_all_called=False); router.start()
    model = ScriptedModel(script() * (count + 10)); model.mount(router)
    rt = Runtime(defs, config=config, storage=SQLiteStorage(":memory:"), settings=RuntimeSettings(gc_freeze=False))
    await rt.open()
    times = []
    for i in range(count + 10):
        thread = await rt.create_thread("chat")
        started = time.process_time()  # CPU time: what tracing costs, less disturbed by a busy machine
        await thread.send("where are my orders?")
        if i >= 10:  # warm-up excluded
            times.append(time.process_time() - started)
    await rt.close(); router.stop()
    print(json.dumps({"enabled": tracing.ENABLED, "times": times}))

asyncio.run(main())
"""


def _run(mode: str, count: int) -> dict[str, object]:
    code = f"ROOT = {str(ROOT)!r}\n" + _CHILD
    out = subprocess.run([sys.executable, "-c", code, mode, str(count)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="modes alternate this many times (noise control)")
    args = parser.parse_args()
    modes = ["off", "api, no SDK", "sdk"]
    keys = {"off": "off", "api, no SDK": "api", "sdk": "sdk"}
    samples: dict[str, list[float]] = {m: [] for m in modes}
    enabled: dict[str, object] = {}
    for _ in range(args.rounds):
        for mode in modes:
            result = _run(keys[mode], args.conversations)
            samples[mode] += [t * 1000 for t in result["times"]]  # type: ignore[union-attr]
            enabled[mode] = result["enabled"]
    base = statistics.median(samples["off"])
    print("Tracing cost, scenario (b) on the scripted model (OpenAI-wire SSE via respx, runtime's wire reader)")
    print(f"{args.rounds} rounds x {args.conversations} conversations per mode, modes alternating\n")
    print("| mode | spans | CPU ms/conversation, median | p90 | x off |")
    print("|---|---|---:|---:|---:|")
    for mode in modes:
        values = sorted(samples[mode])
        median = statistics.median(values)
        p90 = values[int(len(values) * 0.9)]
        spans = "recorded" if mode == "sdk" else ("non-recording" if enabled[mode] else "none (decorators are no-ops)")
        print(f"| {mode} | {spans} | {median:.2f} | {p90:.2f} | {median / base:.3f} |")
    ratio = statistics.median(samples["api, no SDK"]) / base
    verdict = "PASS" if ratio <= 1.05 else "FAIL"
    print(f"\nverdict: tracing nobody collects costs x{ratio:.3f} of none (target <= 1.05): {verdict}")


if __name__ == "__main__":
    main()

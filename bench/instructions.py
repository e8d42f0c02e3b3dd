"""Instructions per conversation, counted by valgrind (callgrind): a measure this noisy machine repeats.

    .venv/bin/python bench/instructions.py [conversations] [chunks]

Wall and CPU times on 2 shared cores drift by more than the `stream: litellm` path's distance from
a bare `acompletion` loop; the instructions a conversation executes (all threads, the collector
included; the kernel and cache misses not) are the same run after run. Each contender runs in its
own process under `valgrind --tool=callgrind`, warmed up with instrumentation off, then counted over
`conversations` of scenario b (a `chunks`-chunk answer, 50 by default; `python -m bench` runs 20)
against the fake provider (its own process, not counted). Contenders: the bare `acompletion` loop;
the same loop reading through the runtime's `ModelClient` (`stream: litellm`: the provider layer
alone); the runtime with `stream: litellm`; and the runtime with its model replayed (its own work:
storage, events, tools).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_LABELS = {
    "litellm": "bare litellm loop (acompletion, LiteLLM's stream)",
    "client": "the same loop through ModelClient (stream: litellm)",
    "runtime_litellm": "this runtime, OpenAI (stream: litellm)",
    "replayed": "this runtime, model replayed (its own work only)",
}
_WARM_UP = 8


async def _count(url: str, key: str, conversations: int, chunks: int) -> None:
    """Runs inside valgrind: warm up, then switch instrumentation on for the counted conversations."""
    from bench.contenders import make
    from bench.contenders.loops import ModelClientLoop
    from bench.fake_provider import model_name

    model = model_name("b", chunks=chunks)
    contender = ModelClientLoop(url) if key == "client" else make("runtime_litellm" if key == "replayed" else key, url)
    run = contender.own_conversation if key == "replayed" else contender.conversation
    for _ in range(_WARM_UP):
        await run("b", model)
    _instrument("on")
    for _ in range(conversations):
        await run("b", model)
    _instrument("off")


def _instrument(state: str) -> None:
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)


def _measure(url: str, key: str, conversations: int, chunks: int, folder: str) -> int:
    out = f"{folder}/callgrind.{key}"
    command = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        sys.executable,
        __file__,
        "--count",
        url,
        key,
        str(conversations),
        str(chunks),
    ]
    log = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", log)
    if found is None:
        raise RuntimeError(f"{key}: callgrind reported no count:\n{log[-2000:]}")
    return int(found.group(1))


def main() -> None:
    if sys.argv[1:2] == ["--count"]:
        url, key, conversations, chunks = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        asyncio.run(_count(url, key, conversations, chunks))
        return
    from bench.run import fake_server

    conversations = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    chunks = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    with fake_server() as url, tempfile.TemporaryDirectory() as folder:
        counts = {key: _measure(url, key, conversations, chunks, folder) / conversations for key in _LABELS}
    bare = counts["litellm"]
    print(f"scenario b (3 steps, 3 tool calls, {chunks}-chunk answer), {conversations} conversations, after {_WARM_UP}")
    print("| contender | million instructions per conversation | x bare loop |\n|---|---:|---:|")
    for key, count in counts.items():
        print(f"| {_LABELS[key]} | {count / 1e6:.1f} | x{count / bare:.3f} |")


if __name__ == "__main__":
    main()

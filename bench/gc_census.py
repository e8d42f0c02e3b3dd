"""What a full collection walks while 1,000 conversations are in flight, and what it costs.

    .venv/bin/python bench/gc_census.py [conversations] [contender]

One process (contender `runtime` by default: the OpenAI wire reader) runs scenario a with 50 ms
provider latency against the fake provider, `conversations` at once, warmed up the way the gc
phase of `python -m bench` warms its workers. Three seconds into the load it stops the loop and
counts the tracked objects outside the frozen heap, the references the collector follows from
them (`gc.get_referents`), which types hold those references (a container by its holder: "dict of
Message" is a model's `__dict__`), and which coroutines and closures are alive per conversation;
then it times two full collections of that heap. The collector's cost follows the references more
than the objects: compare the references followed with the collection time.

Then, for 20 conversations waiting at the in-flight gate (`max_in_flight`, where nine in ten wait at
1,000), what each holds alone: the tracked objects reachable from its task that no other of the 20
reaches, walked without entering the objects every conversation shares (the loop, the runtime and its
services). Those are what a trim of a waiting conversation can remove.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

_NAMED = ("coroutine", "async_generator", "function")


_CONTAINERS = (dict, set, list, tuple)
_SHARED = {"Runtime", "Services", "ModelClient", "SQLiteStorage", "EventBus", "Worker", "RuntimeContender"}
_SHARED |= {"Definitions", "InFlight", "Semaphore", "LiveExecutions"}  # reached from every conversation


def _census(level: int) -> None:
    objects = gc.get_objects()
    referents = [gc.get_referents(o) for o in objects]
    edges = [len(r) for r in referents]
    owner: dict[int, str] = {}  # a container's first holder: a model's `__dict__` reads "dict of Message"
    for obj, refs in zip(objects, referents, strict=True):
        for ref in refs:
            if type(ref) in _CONTAINERS and id(ref) not in owner:
                owner[id(ref)] = type(obj).__qualname__
    del referents
    by_type: collections.Counter[str] = collections.Counter()
    by_name: collections.Counter[str] = collections.Counter()
    for obj, count in zip(objects, edges, strict=True):
        kind = type(obj).__qualname__
        by_type[f"{kind} of {owner.get(id(obj), '?')}" if type(obj) in _CONTAINERS else kind] += count
        if kind in _NAMED:
            by_name[f"{kind} {obj.__qualname__}"] += 1
    print(f"tracked objects: {len(objects)} ({len(objects) / level:.0f} per conversation)")
    print(f"references followed: {sum(edges)} ({sum(edges) / level:.0f} per conversation)")
    print("\n| type | references per conversation |\n|---|---:|")
    for kind, count in by_type.most_common(25):
        print(f"| {kind} | {count / level:.1f} |")
    print("\n| alive per conversation | count |\n|---|---:|")
    for name, count in by_name.most_common(25):
        print(f"| {name} | {count / level:.2f} |")
    _per_lane({id(o) for o in objects})
    del objects
    for _ in range(2):
        cpu = time.thread_time()
        gc.collect()
        print(f"\nfull collection of that heap: {(time.thread_time() - cpu) * 1000:.1f} ms of collector CPU")


def _shared(obj: object) -> bool:
    kind = type(obj).__name__
    if kind == "function" and "gather" in getattr(obj, "__qualname__", ""):  # gather's callback: every lane
        return True
    return kind in _SHARED or "EventLoop" in kind or "Selector" in kind


def _reach(root: object, young: set[int]) -> dict[int, object]:
    seen: dict[int, object] = {id(root): root}
    todo = [root]
    while todo:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) in young and id(ref) not in seen and not _shared(ref):
                seen[id(ref)] = ref
                todo.append(ref)
    return seen


def _named(obj: object) -> str:
    kind = type(obj).__qualname__
    return f"{kind} {getattr(obj, '__qualname__', '')}".rstrip() if kind in (*_NAMED, "method") else kind


def _per_lane(young: set[int]) -> None:
    lanes = []
    for task in asyncio.all_tasks():
        if "lane" in repr(task.get_coro()):
            held = _reach(task, young)
            if len(held) > 5_000:  # reached the other conversations through a shared object not in `_SHARED`
                print(f"\na waiting conversation reaches {len(held)} objects: add what they share to _SHARED")
                return
            if any(_named(o) == "coroutine Semaphore.acquire" for o in held.values()):
                lanes.append(held)
        if len(lanes) == 20:
            break
    if not lanes:
        print("\nno conversation waits at the in-flight gate")
        return
    seen_in: collections.Counter[int] = collections.Counter(k for held in lanes for k in held)
    alone = [[o for k, o in held.items() if seen_in[k] == 1] for held in lanes]
    kinds = collections.Counter(_named(o) for objs in alone for o in objs)
    median = statistics.median(map(len, alone))
    print(f"\nheld alone by a conversation waiting at the gate: {median:.0f} tracked objects")
    print("\n| held alone, per waiting conversation | count |\n|---|---:|")
    for name, count in kinds.most_common(30):
        print(f"| {name} | {count / len(alone):.2f} |")


async def _run(url: str, level: int, key: str) -> None:
    from bench.contenders import make
    from bench.fake_provider import model_name
    from bench.worker import Worker

    worker = Worker(make(key, url))
    await worker.conv(scenario="a", model=model_name("a", chunks=50), repeat=3)
    model = model_name("a", chunks=50, latency=50)
    await worker.load(model=model, concurrency=100, total=100)
    if key != "runtime":  # the runtime freezes its heap at open; freeze the others' the same way
        gc.collect()
        gc.freeze()

    async def census() -> None:
        await asyncio.sleep(3)
        _census(level)

    task = asyncio.create_task(census())
    result = await worker.load(model=model, concurrency=level, total=2 * level)
    await task
    print(
        f"\nload: {2 * level / result['wall']:.1f} conv/s, {result['gc_full']} full collections during it, "
        f"longest {result['gc_max_pause'] * 1000:.1f} ms (collector CPU {result['gc_max_pause_cpu'] * 1000:.1f} ms), "
        f"errors {result['errors']}"
    )


def main() -> None:
    from bench.run import fake_server

    level = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    key = sys.argv[2] if len(sys.argv) > 2 else "runtime"
    with fake_server() as url:
        asyncio.run(_run(url, level, key))


if __name__ == "__main__":
    main()

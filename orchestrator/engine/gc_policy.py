"""When CPython's cyclic collector may pause the event loop.

Two measures, both process-wide like the collector. At the first open, `freeze_heap_once` imports
what a first request needs (LiteLLM leaves ~400k objects) and moves that heap out of the
collector's reach with `gc.freeze()` (`runtime.gc_freeze`). Then, while executions run, full
collections wait (`runtime.gc_defer_full`, `hold_full_collections`).

Why wait: a full (oldest-generation) collection stops the loop and walks every tracked object
outside the frozen heap, so its pause grows with the conversations in flight, 70-230 ms at 1,000
of them on 2 cores. Counted under that load, those collections free almost nothing (0-15 objects
each): a conversation's objects go by reference counting when it ends, and the cyclic garbage
left is about two objects per conversation. So while executions run in this process, a full
collection waits for `FACTOR` times the middle-generation collections CPython waits for. When
the last execution ends, CPython's thresholds are back and it collects on its own schedule, on a
heap that no longer holds the conversations. Under a load that never goes idle, the raised
threshold still bounds how long cyclic garbage waits: at 1,000 conversations in flight, one full
collection per about 6,000 conversations, against one per 150-700 with CPython's own thresholds
(docs/performance.md). Thresholds a host sets while executions run are left as it set them.
"""

from __future__ import annotations

import gc
import threading

FACTOR = 10  # a full collection waits for ten times CPython's middle-generation collections

_lock = threading.Lock()  # executions may run on several threads' event loops
_running = 0  # executions in flight in this process that hold full collections
_restore: tuple[int, int, int] | None = None  # the thresholds the first of them found
_raised: tuple[int, int, int] | None = None  # the thresholds it set
_frozen = False


def freeze_heap_once() -> None:
    """Import LiteLLM and the stream readers' tables, then freeze the heap, once per process.

    The collector is off during the import: it would run ~900 collections (7 of them full) over
    a heap that is about to be frozen, about a third of the import's time."""
    global _frozen
    with _lock:
        if _frozen:
            return
        _frozen = True
    from providers.client import warm_up

    enabled = gc.isenabled()
    gc.disable()
    try:
        warm_up()
    finally:
        if enabled:
            gc.enable()
    gc.collect()
    gc.freeze()


def hold_full_collections() -> None:
    """An execution starts: full collections wait until it (and every other one) has ended."""
    global _running, _restore, _raised
    with _lock:
        _running += 1
        if _running == 1:
            young, middle, full = _restore = gc.get_threshold()
            _raised = (young, middle, full * FACTOR)
            gc.set_threshold(*_raised)


def release_full_collections() -> None:
    """An execution has ended; the last one in the process gives CPython its thresholds back."""
    global _running
    with _lock:
        _running -= 1
        if _running == 0 and _restore is not None and gc.get_threshold() == _raised:
            gc.set_threshold(*_restore)

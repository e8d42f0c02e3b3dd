"""What the Python sandbox's workers look like from the host, read from /proc.

A worker is a `monty` process below this test process: the pool starts the jail's
launcher, which becomes bwrap, whose child inside the new PID namespace runs
`/monty subprocess` (with `python_jail: none`, the pool starts `monty` itself).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path


def descendants(root: int | None = None) -> list[int]:
    """Every process below `root` (this process by default), found by walking /proc's parent links."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry.name))
    found, stack = [], [root or os.getpid()]
    while stack:
        for child in parents.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def workers() -> list[int]:
    """This process's live Monty workers (idle or running a guest)."""
    found = []
    for pid in descendants():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] in ([b"/monty", b"subprocess"],) or (argv[0].endswith(b"/monty") and argv[1:2] == [b"subprocess"]):
            found.append(pid)
    return found


def state(pid: int) -> str:
    """The kernel's one-letter state (R running, S sleeping, Z zombie); "gone" once the process has ended."""
    return state_of(Path(f"/proc/{pid}/stat"))


def computing(pid: int) -> bool:
    """Any thread of `pid` on the CPU (the process's own state is only its main thread's)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False
    return any(state_of(task / "stat") == "R" for task in tasks)


def state_of(stat: Path) -> str:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def running_workers() -> list[int]:
    """Workers on the CPU: a guest computing (idle workers wait on their pipe)."""
    return [pid for pid in workers() if computing(pid)]


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        await asyncio.sleep(0.01)
    return condition()

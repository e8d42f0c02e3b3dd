"""`runtime.gc_freeze`: on by default, the heap is frozen once per process at open; a host can turn it off.

In a subprocess, since the freeze is process-wide and happens once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CODE = textwrap.dedent(
    """\
    import asyncio, gc

    print("START", gc.get_freeze_count())  # Python 3.12 starts with a few hundred objects frozen

    from orchestrator import Runtime
    from orchestrator.settings import RuntimeSettings


    async def opened(settings):
        runtime = Runtime.from_path("agents", config="configs/default.yaml", storage="sqlite://:memory:",
                                    settings=settings)
        async with runtime:
            return gc.get_freeze_count()


    print("OFF", asyncio.run(opened(RuntimeSettings(gc_freeze=False, model="test"))))
    print("DEFAULT", asyncio.run(opened(RuntimeSettings(model="test"))))
    """
)


def test_gc_freeze_is_on_by_default_and_a_host_can_turn_it_off() -> None:
    done = subprocess.run([sys.executable, "-c", _CODE], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    counts = dict(line.split() for line in done.stdout.splitlines())
    assert counts["OFF"] == counts["START"]  # nothing frozen while the setting is off
    assert int(counts["DEFAULT"]) - int(counts["START"]) > 100_000  # LiteLLM's import heap, frozen

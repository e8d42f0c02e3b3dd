"""Many threads at once in one process; two processes on one database.

- 500 `dual_ai` threads run concurrently on scripted models; each ends with
  exactly its own transcript, every message stored once.
- A thread's lease is per database, not per process: while one process runs a
  thread, another process's `thread.run()` gets ThreadBusyError, both ways.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support import definitions

from orchestrator import Side, define_agent, define_prompt
from orchestrator.storage import ThreadBusyError
from providers.scripted import ScriptedResponse

ROOT = Path(__file__).resolve().parent.parent
THREADS = 500
TURNS = 2  # each a LiteLLM call: 1000 in all (~20 s on 2 cores)


def _script(body: dict[str, Any]) -> ScriptedResponse:
    messages = body["messages"]
    _, side, _, tag = messages[0]["content"].split()  # "side a of T17"
    return ScriptedResponse(text=f"{side} {tag} {len(messages)}")


def _defs() -> Any:
    prompts = {
        "pa": define_prompt(prompt="side a of {tag}", tool_description="a"),
        "pb": define_prompt(prompt="side b of {tag}", tool_description="b"),
    }
    agent = define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=TURNS)
    return definitions(prompts=prompts, agents={"duo": agent})


@pytest.mark.slow
async def test_500_concurrent_dual_ai_threads_store_every_message_once(make_runtime: Any) -> None:
    rt, model = await make_runtime(_defs(), _script)
    threads = [await rt.create_thread("duo", arguments={"tag": f"T{i}"}) for i in range(THREADS)]
    results = await asyncio.wait_for(asyncio.gather(*(t.run() for t in threads)), 120)
    assert all(r.reason == "max_session_turns" and r.step_count == TURNS for r in results)
    assert len(model.requests) == THREADS * TURNS
    for i, thread in enumerate(threads):
        messages = (await thread.get_messages()).messages
        # the text names the request's length: a sees system + opening, b sees system + a's text
        expected = [f"a T{i} 2", f"b T{i} 2"]
        assert [m.content for m in messages] == expected, (i, [m.content for m in messages])
        assert [m.seq for m in messages] == sorted({m.seq for m in messages})
        events = await rt.storage.events_after(thread.id, 0)
        created = Counter(e.data["id"] for e in events if e.type == "message_created")
        assert sorted(created) == sorted(m.id for m in messages) and set(created.values()) == {1}
        assert (await thread.refresh()).status == "completed"


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from orchestrator.storage.sqlite import SQLiteStorage

    async def main():
        async with SQLiteStorage({db!r}) as storage:
            lease = await storage.acquire_lease({thread!r}, "other-process", 60)
            print("HELD", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
            await storage.release_lease(lease)
            print("RELEASED", flush=True)

    asyncio.run(main())
    """
)

_RUNNER = textwrap.dedent(
    """
    import asyncio, sys
    sys.path[:0] = [{root!r}, {tests!r}]
    from orchestrator.runtime import Runtime
    from orchestrator.storage import ThreadBusyError
    from orchestrator.storage.sqlite import SQLiteStorage
    from providers.config import config_from_dict
    from conftest import SCRIPTED_CONFIG
    from test_concurrency import _defs

    async def main():
        runtime = Runtime(_defs(), config=config_from_dict(SCRIPTED_CONFIG), storage=SQLiteStorage({db!r}))
        async with runtime:
            thread = await runtime.get_thread({thread!r})
            try:
                await thread.run()
                print("RAN")
            except ThreadBusyError as exc:
                print("BUSY", exc)

    asyncio.run(main())
    """
)


def _python(code: str, **values: str) -> list[str]:
    return [sys.executable, "-c", code.format(root=str(ROOT), tests=str(ROOT / "tests"), **values)]


async def test_other_process_cannot_run_a_thread_this_process_runs(make_runtime: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    rt, model = await make_runtime(
        _defs(), [ScriptedResponse(text="this stream hangs", chunk_size=2, hang_after=2)], db=db
    )
    thread = await rt.create_thread("duo", arguments={"tag": "T"})
    run = asyncio.create_task(thread.run())
    async for event in thread.events():  # the first streamed text: the execution holds the lease
        if event.type == "text_delta":
            break
    other = await asyncio.create_subprocess_exec(*_python(_RUNNER, db=db, thread=thread.id), stdout=subprocess.PIPE)
    out, _ = await asyncio.wait_for(other.communicate(), 60)
    thread.stop()
    await asyncio.wait_for(run, 10)
    assert out.decode().startswith("BUSY"), out
    assert thread.id in out.decode()


async def test_this_process_cannot_run_a_thread_another_process_holds(make_runtime: Any, tmp_path: Path) -> None:
    db = str(tmp_path / "shared.db")
    rt, model = await make_runtime(_defs(), _script, db=db)
    thread = await rt.create_thread("duo", arguments={"tag": "T"})
    holder = subprocess.Popen(
        _python(_HOLDER, db=db, thread=thread.id), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "HELD"
        with pytest.raises(ThreadBusyError, match="other-process"):
            await thread.run()
        assert model.requests == []  # refused before any model call
        assert (await thread.get_messages()).total == 0
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "RELEASED"
    finally:
        holder.kill() if holder.poll() is None else None
        holder.wait()
    result = await thread.run()  # released: this process may run it now
    assert result.step_count == TURNS

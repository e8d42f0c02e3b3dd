"""The process that gets killed, for tests/test_crash_resume.py (and bench/faults.py).

Run as `python tests/crash_child.py serve`. Importing LiteLLM takes seconds, so
this process imports everything once, prints `READY`, then for each stdin line

    run <db> <runs_file> <label> <clock_offset> <id_offset>

forks a worker process that opens the SQLite file and runs every `dual_ai`
thread in it that is not finished (new ones from the start, crashed ones with
status "running" resumed), then exits. The parent SIGKILLs workers at random
moments; this process reaps each and prints `EXIT <pid> <status>`.

Worker output, one line each, flushed: `PID <pid>`, `@@ <pid> <point>` at each
kill point worth hitting (model request, tool start/end, before/after every
storage commit), `DONE <pid>` when all threads finished.

Determinism: the scripted model's answer is a function of the request it gets
(system prompt names side and thread tag, the message count says where in the
conversation it is), so a resumed process gets the answers an uninterrupted one
would. Tools append `<label> <token>` to the runs file when they start, so the
parent counts runs across processes.

`<db>` is a SQLite file, or `pg:<schema>` for PostgreSQL. Two knobs make
separate processes look like one long-lived deployment: `clock_offset` runs
this worker's lease clock ahead (the crash test passes 0: a dead worker's
lease is taken at once, its owner being a process on this host that is gone),
and `id_offset` starts the scripted model's call-id numbering there (real
providers never reuse ids).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
import faulthandler
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import respx
from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from support import definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.logs import configure_logging
from orchestrator.core.settings import RuntimeSettings
from orchestrator.runtime import Runtime
from orchestrator.storage import StepWrite
from orchestrator.storage.postgres import PostgresStorage
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

AGENT = "duo"
TURNS = 6
CONFIG = {
    "providers": {"scripted": {"type": "scripted"}},
    "models": {"demo": {"provider": "scripted", "model": "demo", "retry": {"attempts": 1}}},
    "default_model": "demo",
}


def _point(kind: str) -> None:
    sys.stdout.write(f"@@ {os.getpid()} {kind}\n")
    sys.stdout.flush()


class Note(BaseModel):
    token: str


def script(body: dict[str, Any]) -> ScriptedResponse:
    """Side a: two tool calls, then a text; side b: a call of the `research` prompt, whose nested loop
    makes one tool call and answers, then a text. Keyed on the request."""
    _point("request")
    messages = body["messages"]
    kind, side, _, tag = messages[0]["content"].split()  # "side a of T3", "research b of T3" (b's nested loop)
    n = len(messages)
    if kind == "research":
        if messages[-1]["role"] == "tool":
            return ScriptedResponse(text=f"found {tag} {n}")
        topic = messages[1]["content"]  # the call's message: one per call
        return ScriptedResponse(tool_calls=[ScriptedCall("note", {"token": f"{topic}-r"})])
    if side == "b":
        if messages[-1]["role"] == "tool":
            return ScriptedResponse(text=f"b {tag} {n}")
        return ScriptedResponse(tool_calls=[ScriptedCall("research", {"message": f"{tag}-{n}"})])
    if messages[-1]["role"] == "tool":
        return ScriptedResponse(text=f"a {tag} {n}: noted")
    return ScriptedResponse(
        tool_calls=[ScriptedCall("note", {"token": f"{tag}-{n}-x"}), ScriptedCall("note", {"token": f"{tag}-{n}-y"})]
    )


def build_definitions(runs_file: str, label: str) -> Any:
    async def note(state: Any, args: Note) -> dict:
        _point("tool_start")
        with open(runs_file, "a", encoding="utf-8") as f:
            f.write(f"{label} {args.token}\n")
        # parallel calls of different durations: y (the second call) finishes, and
        # its result is stored, while x (the first) still runs
        await asyncio.sleep(0.02 if args.token.endswith("-x") else 0)
        if args.token.endswith("-y"):
            state.queue_tool("stamp", {"token": f"{args.token}-q"})  # runs after it: a kill may land in between
        _point("tool_end")
        return {"status": "success", "result": f"noted {args.token}"}

    async def stamp(state: Any, args: Note) -> dict:
        _point("tool_start")
        with open(runs_file, "a", encoding="utf-8") as f:
            f.write(f"{label} {args.token}\n")
        _point("tool_end")
        return {"status": "success", "result": f"stamped {args.token}"}

    prompts = {
        "pa": define_prompt(prompt="side a of {tag}", tool_description="a", tools=("note",)),
        "pb": define_prompt(prompt="side b of {tag}", tool_description="b", tools=("research",)),
        "research": define_prompt(prompt="research b of {tag}", tool_description="Look into it", tools=("note",)),
    }
    agent = define_agent(type="dual_ai", side_a=Side("pa", max_steps=4), side_b=Side("pb"), max_session_turns=TURNS)
    return definitions(
        tools={
            "note": define_tool(description="Note a token", args=Note, execute=note, uses=("stamp",)),
            "stamp": define_tool(description="Stamp a token", args=Note, execute=stamp),
        },
        prompts=prompts,
        agents={AGENT: agent},
    )


class _Marked:
    """Announces each commit's start and end: kill points on both sides of a transaction."""

    async def commit(self, write: StepWrite) -> list[Any]:
        _point("commit_start")
        stored = await super().commit(write)  # type: ignore[misc]
        _point("commit_end")
        return stored


class _MarkedSQLite(_Marked, SQLiteStorage):
    pass


class _MarkedPostgres(_Marked, PostgresStorage):
    pass


def open_store(db: str, clock: Any = time.time) -> Any:
    """`pg:<schema>`: PostgreSQL (ORCHESTRATOR_TEST_POSTGRES_DSN, that schema); else a SQLite file."""
    if db.startswith("pg:"):
        dsn = os.environ.get("ORCHESTRATOR_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")
        return _MarkedPostgres(dsn, schema=db[3:], clock=clock)
    return _MarkedSQLite(db, clock=clock)


async def work(db: str, runs_file: str, label: str, clock_offset: float, id_offset: int) -> None:
    configure_logging("ERROR", stream=sys.stderr)
    model = ScriptedModel(script)
    model.requests.extend([{}] * id_offset)  # call ids continue where the last process's could have
    router = respx.mock(assert_all_called=False)
    model.mount(router)
    router.start()
    storage = open_store(db, clock=lambda: time.time() + clock_offset)
    runtime = Runtime(
        build_definitions(runs_file, label),
        config=config_from_dict(CONFIG),
        storage=storage,
        settings=RuntimeSettings(lease_ttl=30),
    )
    try:
        async with runtime:
            pending = [t for t in await runtime.list_threads(limit=10_000) if t.status in ("idle", "running")]
            threads = [await runtime.get_thread(t.id) for t in pending]
            await asyncio.gather(*(t.run() for t in threads))
    finally:
        router.stop()
    sys.stdout.write(f"DONE {os.getpid()}\n")
    sys.stdout.flush()


def _worker(args: list[str]) -> None:
    db, runs_file, label, clock_offset, id_offset = args
    code = 0
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks for our stacks if we go quiet
    try:
        sys.stdout.write(f"PID {os.getpid()}\n")
        sys.stdout.flush()
        asyncio.run(work(db, runs_file, label, float(clock_offset), int(id_offset)))
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    import litellm  # noqa: F401 - the slow import, paid once before forking

    print("READY", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        if parts[0] != "run":
            print(f"ERROR unknown command {parts[0]!r}", flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            _worker(parts[1:])
        _, status = os.waitpid(pid, 0)
        print(f"EXIT {pid} {status}", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve()
    else:
        _worker(sys.argv[1:])

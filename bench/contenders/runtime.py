"""This runtime as a user runs it: a `Runtime` on a config whose provider is
`type: openai` (or `anthropic`, `gemini`) with `base_url` at the fake server, definitions built in code,
storage in a temporary SQLite file. A conversation is `create_thread` then
`send` (ai_human) or `run` (dual_ai), exactly the README's entry points.

It also answers the runtime-only measures: memory per idle thread, and the
delay from the delta that closes a progress argument to `tool_call_started`
(hook and live event), taken at the model client's boundary.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from .common import DUAL_TURNS_PER_SIDE, SCENARIO_TOOLS, SYSTEM, TOOLS, USER


class _LookupArgs(BaseModel):
    key: str = Field(description="The key")


class _ConvertArgs(BaseModel):
    value: str = Field(description="The value")


class _SearchArgs(BaseModel):
    query: str = Field(description="What to search")
    limit: int = Field(10, description="Hits")


_ARGS = {"lookup": _LookupArgs, "convert": _ConvertArgs, "search": _SearchArgs}


def _tool(name: str) -> Any:
    from orchestrator import ToolResult, define_tool

    async def execute(state: Any, args: BaseModel) -> ToolResult:
        return ToolResult(status="success", result=str(TOOLS[name](**args.model_dump())))

    return define_tool(
        description=TOOLS[name].__doc__ or name,
        args=_ARGS[name],
        execute=execute,
        progress_argument="query" if name == "search" else None,
    )


class _ClosingWatch:
    """Wraps the model client: stamps the moment the delta closing a watched
    call's progress argument leaves the client (per call index)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.closing_at: int | None = None  # character offset of the closing quote
        self.stamps: dict[int, float] = {}

    def model_info(self, alias: str | None) -> Any:
        return self._inner.model_info(alias)

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        from providers.stream import ToolCallDelta

        seen: dict[int, int] = {}
        async for item in self._inner.stream(*args, **kwargs):
            if self.closing_at is not None and isinstance(item, ToolCallDelta):
                before = seen.get(item.index, 0)
                seen[item.index] = before + len(item.arguments)
                if before <= self.closing_at < seen[item.index]:
                    self.stamps[item.index] = time.perf_counter()
            yield item


class _Replay:
    """Wraps the model client: records each request's items once, then replays
    them with no HTTP at all, so a conversation costs only the runtime's own work."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._recorded: list[list[Any]] = []
        self._recording = True
        self._next = 0

    def model_info(self, alias: str | None) -> Any:
        return self._inner.model_info(alias)

    def replay(self) -> None:
        self._recording, self._next = False, 0

    async def stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if self._recording:
            items = [item async for item in self._inner.stream(*args, **kwargs)]
            self._recorded.append(items)
        else:
            items = self._recorded[self._next % len(self._recorded)]
            self._next += 1
        for item in items:
            yield item


class RuntimeContender:
    name = "this runtime"

    def __init__(
        self,
        base_url: str,
        *,
        stream: str = "auto",
        gc_freeze: bool = True,
        gc_defer_full: bool = True,
        wire: str = "openai",
        storage: Callable[[Path], Any] | None = None,
    ) -> None:
        self._base = f"{base_url}/v1" if wire == "openai" else base_url  # LiteLLM adds /v1/messages and /models/...
        self._wire = wire
        self._stream = stream  # the provider's `stream` setting: auto (as shipped) or litellm
        self._gc_freeze = gc_freeze
        self._gc_defer_full = gc_defer_full
        self._storage = storage  # opens the storage for a database path (bench/gap.py); default: SQLite there
        self._opening = asyncio.Lock()
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-runtime-")
        self._runtimes: dict[tuple[str, str], Any] = {}
        self.started: list[tuple[int, float]] = []  # (call index, perf_counter) from the hook

    async def _runtime(self, scenario: str, model: str, *, stubbed: bool = False) -> Any:
        key = (scenario, model, stubbed)
        async with self._opening:  # concurrent first conversations share one runtime
            if key not in self._runtimes:
                self._runtimes[key] = await self._open(scenario, model, stubbed)
        return self._runtimes[key]

    async def _open(self, scenario: str, model: str, stubbed: bool) -> Any:
        from orchestrator import Runtime
        from orchestrator.core.settings import RuntimeSettings
        from orchestrator.storage import open_storage
        from providers.client import ModelClient
        from providers.config import config_from_dict

        config = config_from_dict(
            {
                "providers": {
                    "bench": {"type": self._wire, "base_url": self._base, "api_key": "bench", "stream": self._stream}
                },
                "models": {"bench": {"provider": "bench", "model": model, "retry": {"attempts": 1}, "timeout": 600}},
                "default_model": "bench",
            }
        )
        client = (
            _ClosingWatch(ModelClient(config)) if scenario == "d" else _Replay(ModelClient(config)) if stubbed else None
        )
        db = Path(self._tmp.name) / f"rt{len(self._runtimes)}.db"
        runtime = Runtime(
            self._definitions(scenario),
            config=config,
            storage=self._storage(db) if self._storage else open_storage(f"sqlite:///{db}"),
            client=client,
            settings=RuntimeSettings(gc_freeze=self._gc_freeze, gc_defer_full=self._gc_defer_full),
        )
        return await runtime.open()

    def _definitions(self, scenario: str) -> Any:
        from orchestrator import Side, define_agent, define_hook, define_prompt
        from orchestrator.definitions.loader import Definitions

        names = SCENARIO_TOOLS[scenario]
        prompt = define_prompt(prompt=SYSTEM, model="bench", tools=names, tool_description="The benchmark agent")
        if scenario == "c":
            agent = define_agent(
                type="dual_ai", side_a=Side("bench"), side_b=Side("bench"), max_session_turns=2 * DUAL_TURNS_PER_SIDE
            )
        else:
            agent = define_agent(type="ai_human", side_a=Side("bench", max_steps=10))
        hooks = {}
        if scenario == "d":
            hooks["tool_call_started"] = define_hook(
                "tool_call_started", lambda state, call: self.started.append((call.index, time.perf_counter()))
            )
        return Definitions(
            root=Path("."),
            tools={n: _tool(n).named(n) for n in names},
            prompts={"bench": prompt.named("bench")},
            agents={"bench": agent.named("bench")},
            hooks={k: v.named(k) for k, v in hooks.items()},
        )

    async def conversation(self, scenario: str, model: str) -> int:
        return await self.conversation_on(await self._runtime(scenario, model), scenario)

    async def own_conversation(self, scenario: str, model: str) -> int:
        """The same conversation with the model stubbed by a replay of its first run:
        what is left is the runtime's own cost (threads, storage, events, views)."""
        runtime = await self._runtime(scenario, model, stubbed=True)
        replay: _Replay = runtime.services.client
        if replay._recording:
            await self.conversation_on(runtime, scenario)
            replay.replay()
        return await self.conversation_on(runtime, scenario)

    async def conversation_on(self, runtime: Any, scenario: str) -> int:
        thread = await runtime.create_thread("bench")
        result = await (thread.run() if scenario == "c" else thread.send(USER))
        return result.step_count

    async def idle_threads(self, n: int) -> list[Any]:
        """Create `n` threads and keep their handles (the caller measures memory)."""
        runtime = await self._runtime("a", "bench-a")
        return [await runtime.create_thread("bench") for _ in range(n)]

    async def progress(self, model: str, closing_at: int) -> dict[str, Any]:
        """Run scenario d once; delays from each closing delta to hook and event."""
        runtime = await self._runtime("d", model)
        watch: _ClosingWatch = runtime.services.client
        watch.closing_at, watch.stamps = closing_at, {}
        self.started.clear()
        thread = await runtime.create_thread("bench")
        events: dict[int, float] = {}
        subscriber = asyncio.create_task(_watch_events(thread, events))
        await asyncio.sleep(0)
        start = time.perf_counter()
        await thread.send(USER)
        wall = time.perf_counter() - start
        subscriber.cancel()
        hook = [at - watch.stamps[i] for i, at in self.started if i in watch.stamps]
        event = [at - watch.stamps[i] for i, at in events.items() if i in watch.stamps]
        return {"wall": wall, "hook_delays": hook, "event_delays": event, "calls": len(watch.stamps)}

    async def close(self) -> None:
        for runtime in self._runtimes.values():
            await runtime.close()
        self._tmp.cleanup()


async def _watch_events(thread: Any, out: dict[int, float]) -> None:
    async for event in thread.events():
        if event.type == "tool_call_started":
            out.setdefault(event.data["index"], time.perf_counter())

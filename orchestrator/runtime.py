"""`Runtime`: the entry point a user calls from Python; its threads are `Thread`s (thread.py).

    runtime = Runtime.from_path("agents", config="configs/default.yaml")
    thread = await runtime.create_thread("support_demo")
    result = await thread.run()          # dual_ai: until the execution stops
    result = await thread.send("Hi")     # ai_human: the person's turn, then side a's

`Services` (services.py) bundles what every layer below shares, so each of
them takes one argument; `LiveExecutions` (live.py) knows which execution of a
thread runs here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator.core.logs import ensure_logging, register_secrets
from orchestrator.core.messages import EnvType, EnvValue, ThreadRecord
from orchestrator.core.secrets import MIN_SECRET_LEN, SecretScopes
from orchestrator.core.settings import RuntimeSettings
from orchestrator.core.validation import describe
from orchestrator.definitions.define import AgentDefinition, DefinitionError, MessageArgs
from orchestrator.engine import gc_policy
from orchestrator.engine.executor import ExecutionFailed, ExecutionResult
from orchestrator.engine.hooks import Hooks
from orchestrator.engine.live import LiveExecutions
from orchestrator.engine.services import Services
from orchestrator.engine.waiting import WaitingDesk
from orchestrator.storage import Storage, open_storage
from orchestrator.storage.events import EventBus
from orchestrator.storage.lease import Heartbeat
from orchestrator.storage.owners import process_owner
from orchestrator.thread import Thread

if TYPE_CHECKING:
    from orchestrator.definitions.loader import Definitions
    from orchestrator.mcp import McpTools
    from orchestrator.storage.broker import RedisBroker
    from providers.client import ModelClient
    from providers.config import ProvidersConfig

__all__ = ["ExecutionFailed", "ExecutionResult", "Runtime", "Services", "Thread"]


class Runtime:
    def __init__(
        self,
        definitions: Definitions,
        *,
        config: ProvidersConfig,
        storage: Storage,
        settings: RuntimeSettings | None = None,
        client: ModelClient | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.definitions = definitions
        self.clock = clock  # waiting calls' request and expiry times
        self.config = config
        self.settings = settings or RuntimeSettings()
        self.storage = storage
        self._client = client
        self._services: Services | None = None
        self._open_lock = asyncio.Lock()
        self.live = LiveExecutions()  # which execution of a thread runs here; controls said before it does
        self._tasks: set[asyncio.Task[Any]] = set()  # executions start() began; close() waits for them
        self._inline: dict[asyncio.Future[None], asyncio.Task[Any]] = {}  # run()/send() executions: end -> caller
        self._broker: RedisBroker | None = None  # when settings.redis is set

    @classmethod
    def from_path(
        cls,
        path: str | Path = "agents",
        *,
        config: str | Path | Sequence[str | Path] | ProvidersConfig = "configs/default.yaml",
        storage: str | Storage | None = None,
        settings: RuntimeSettings | None = None,
        model: str | None = None,
    ) -> Runtime:
        """Load definitions and config now (errors surface here); storage opens on first use.

        `model` runs every prompt on that alias, or on an offline model: `test`,
        a script file or `module:function` (see `providers.offline`)."""
        from orchestrator.definitions.loader import load_definitions
        from providers.config import ProvidersConfig, load_config

        definitions = load_definitions(path)
        if isinstance(config, ProvidersConfig):
            providers_config = config
        else:
            paths = [config] if isinstance(config, (str, Path)) else list(config)
            providers_config = load_config(*paths)
        settings = settings or _settings_from(providers_config)
        if model is not None:
            if model not in providers_config.models:
                providers_config.add_offline_model(model)
            providers_config.model_info(model)
            settings = settings.model_copy(update={"model": model})
        store = open_storage(storage or settings.storage) if not isinstance(storage, Storage) else storage
        return cls(definitions, config=providers_config, storage=store, settings=settings)

    # -- lifecycle ---------------------------------------------------------
    async def open(self) -> Runtime:
        async with self._open_lock:
            if self._services is None:
                self._check_models()
                ensure_logging()
                if self.settings.gc_freeze:
                    gc_policy.freeze_heap_once()
                broker = await self._open_broker()  # first: an unreachable Redis fails this open and the next
                try:
                    await self.storage.open()
                except BaseException:
                    if broker is not None:
                        await broker.close()
                    raise
                from orchestrator.sandbox import configure as configure_sandbox  # light: the engines load on first run

                configure_sandbox(self.settings.sandbox)  # process-wide: the last runtime opened sets it
                redactor = SecretScopes(config_secrets(self.config))
                register_secrets(redactor)
                client = self._client
                if client is None:
                    from providers.client import ModelClient

                    client = ModelClient(self.config)
                services = Services(
                    definitions=self.definitions,
                    storage=self.storage,
                    bus=EventBus(self.storage, redactor),
                    hooks=Hooks(self.definitions.hooks),
                    client=client,
                    settings=self.settings,
                    redactor=redactor,
                    runtime_env={k: EnvValue(name=k, value=v, type="text") for k, v in self.settings.env.items()},
                    owner=process_owner(),
                    heartbeat=Heartbeat(self.storage),
                    mcp=_mcp_tools(self.config, redactor),
                    clock=self.clock,
                )
                if broker is not None:
                    services.bus.use_broker(broker)
                self._broker, self._services = broker, services  # open only once everything is
        return self

    async def _open_broker(self) -> RedisBroker | None:
        if not self.settings.redis:
            return None
        from orchestrator.storage.broker import RedisBroker

        return await RedisBroker(self.settings.redis).open()

    async def close(self, timeout: float = 30.0) -> None:
        """Stop the executions started here, wait for each to store its end
        (cancel those still running after `timeout` seconds), then close storage."""
        if self._services is not None:
            await self._stop_executions(timeout)
            await self._services.bus.close()
            if self._services.mcp is not None:
                await self._services.mcp.close()
            if self._broker is not None:
                await self._broker.close()
                self._broker = None
            await self.storage.close()
            self._services = None

    def stop_all(self, reason: str) -> None:
        """Stop every execution running here, and every one still being started
        (it ends before its first model request); `stopped_by` is "caller"."""
        self.live.stop_all(reason)

    # -- the executions close() waits for (a Thread starts them) ---------------------
    def keep(self, task: asyncio.Task[Any], *, until_done: bool = False) -> None:
        """Hold a task a thread started in the background (an execution, a stop): close() waits for it.
        `until_done`: released when it ends; else its own done callback calls `release`."""
        self._tasks.add(task)
        if until_done:
            task.add_done_callback(self._tasks.discard)

    def release(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)

    @contextlib.contextmanager
    def inline(self, caller: asyncio.Task[Any]) -> Iterator[None]:
        """An execution run in `caller`'s own task (run(), send()): close() waits for its end all the
        same, and cancels `caller` if it outlasts its stop."""
        end: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inline[end] = caller
        try:
            yield
        finally:
            del self._inline[end]
            end.set_result(None)

    async def _stop_executions(self, timeout: float) -> None:
        self.stop_all("runtime closed")
        current = asyncio.current_task()
        ends: set[asyncio.Future[Any]] = {t for t in self._tasks if t is not current}
        ends |= {end for end, caller in self._inline.items() if caller is not current}
        if not ends:
            return
        _, late = await asyncio.wait(ends, timeout=timeout)
        for end in late:  # still busy after its stop (a tool or hook that ignores it): cancel the task running it
            self._inline.get(end, end).cancel()
        if late:
            await asyncio.wait(late)

    async def __aenter__(self) -> Runtime:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def services(self) -> Services:
        if self._services is None:
            raise RuntimeError("Runtime is not open: use `async with runtime:` or `await runtime.open()`")
        return self._services

    def _check_models(self) -> None:
        """Every prompt's model alias exists, and provider tools match their model's provider."""
        from orchestrator.model_checks import model_problems

        problems = model_problems(self.definitions, self.config, override=self.settings.model)
        if problems:
            count = len(problems)
            raise DefinitionError(
                "\n".join(
                    [
                        f"{count} prompt{'s' if count != 1 else ''} cannot run on their model:",
                        *(str(p) for p in problems),
                    ]
                )
            )

    # -- threads -----------------------------------------------------------
    async def create_thread(
        self,
        agent: str,
        arguments: dict[str, Any] | None = None,
        user_id: str | None = None,
        *,
        thread_id: str | None = None,
    ) -> Thread:
        """A new thread of `agent`. `thread_id`: the id a protocol client chose (an AG-UI `threadId`);
        storage refuses one that exists (StorageError). Default: a fresh `thr_...` id."""
        await self.open()
        definition = self.agent(agent)
        args = _check_arguments(definition, arguments or {})
        record = ThreadRecord(agent_id=agent, user_id=user_id, arguments=args)
        if thread_id is not None:
            record.id = thread_id
        record = await self.services.bus.create_thread(record, {"agent": agent, "user_id": user_id})
        return Thread(self, record)

    async def get_thread(self, thread_id: str) -> Thread:
        await self.open()
        return Thread(self, await self.storage.get_thread(thread_id))

    async def list_threads(
        self, *, user_id: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[ThreadRecord]:
        await self.open()
        return await self.storage.list_threads(user_id=user_id, limit=limit, offset=offset)

    async def run(
        self,
        agent: str,
        input: str | None = None,
        *,
        arguments: dict[str, Any] | None = None,
        user_id: str | None = None,
    ) -> ExecutionResult:
        """One call: create a thread and run it (dual_ai) or send `input` (ai_human)."""
        thread = await self.create_thread(agent, arguments, user_id)
        return await (thread.send(input) if input is not None else thread.run())

    async def set_user_env(self, user_id: str, name: str, value: str, type: EnvType = "secret") -> None:
        await self.open()
        if type == "secret" and len(value) < MIN_SECRET_LEN:
            raise ValueError(
                f"set_user_env: secret value for {name!r} must be at least {MIN_SECRET_LEN} characters; "
                "store it with type 'text' if it need not be hidden"
            )
        await self.storage.set_env("user", user_id, name, value, type)  # redacted in a thread once it reads it

    @property
    def waiting(self) -> WaitingDesk:
        """Decisions on waiting calls (engine/waiting.py); `Thread.approve` and the others go through it."""
        return WaitingDesk(self.services)

    async def expire_waiting_calls(self) -> int:
        """Reject every overdue approval (`approval_timeout`) and resume the threads that leaves with
        nothing open; the number resumed. A server calls it now and then (`orchestrator serve` does)."""
        await self.open()
        resumed = 0
        for thread_id in await self.waiting.expire_due():
            resumed += await Thread(self, await self.storage.get_thread(thread_id)).resume() is not None
        return resumed

    def agent(self, name: str) -> AgentDefinition:
        """The definition of agent `name`; a KeyError lists the known ones."""
        agents: dict[str, AgentDefinition] = self.definitions.agents
        if name not in agents:
            raise KeyError(f"unknown agent {name!r}; known agents: {', '.join(sorted(agents)) or 'none'}")
        return agents[name]


def _check_arguments(agent: AgentDefinition, arguments: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(arguments, dict):
        raise TypeError(f"arguments must be a dict, got {type(arguments).__name__}")
    if agent.args is not None and agent.args is not MessageArgs:  # MessageArgs: only for calls as a tool
        try:
            arguments = agent.args.model_validate(arguments).model_dump(mode="json")
        except ValidationError as exc:
            problems = describe(exc)
            raise ValueError(f"arguments for agent {agent.name!r}: {problems}") from None
    try:
        json.dumps(arguments)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"arguments must be JSON-serialisable: {exc}") from None
    return arguments


def _settings_from(config: ProvidersConfig) -> RuntimeSettings:
    raw: object = getattr(config, "runtime", None)
    if isinstance(raw, RuntimeSettings):
        return raw
    return RuntimeSettings.model_validate(raw or {})


def _mcp_tools(config: ProvidersConfig, secrets: SecretScopes) -> McpTools | None:
    """The config's MCP servers (nothing starts until a prompt that names them runs)."""
    servers = getattr(config, "mcp_servers", None)
    if not servers:
        return None
    import importlib.util

    if importlib.util.find_spec("mcp") is None or importlib.util.find_spec("jsonschema") is None:
        raise RuntimeError(
            "the config declares mcp_servers, which need the MCP SDK: pip install 'orchestrator-runtime[mcp]'"
        )
    from orchestrator.mcp import McpTools

    # stderr is the operator's log; the credentials in a server's env and headers are process-wide secrets
    return McpTools(servers, lambda text: secrets.everywhere().text(text), secrets.add)


def config_secrets(config: ProvidersConfig) -> list[str]:
    """API keys the config resolves from the environment (for redaction)."""
    secrets: list[str] = []
    for provider in getattr(config, "providers", {}).values():
        ref = getattr(provider, "api_key", None)
        if isinstance(ref, str) and ref.startswith("${") and ref.endswith("}"):
            value = os.environ.get(ref[2:-1])
            if value:
                secrets.append(value)
    return secrets

"""`Services`: what every layer of one runtime shares (storage, event bus, hooks,
model client, settings, secret scopes), so each of them takes one typed argument.

Its own module, importing no layer that uses it, so the executor, dispatch and
nested calls can name its type without an import cycle through `runtime.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.core.messages import EnvValue, Message, ThreadRecord
from orchestrator.core.secrets import SecretScopes
from orchestrator.core.settings import RuntimeSettings
from orchestrator.engine.hooks import Hooks
from orchestrator.storage import StepWrite, Storage
from orchestrator.storage.events import EventBus, MessageEventName
from orchestrator.storage.lease import Heartbeat

if TYPE_CHECKING:
    from orchestrator.definitions.loader import Definitions
    from orchestrator.engine.state import ThreadState
    from orchestrator.engine.toolset import Toolset
    from orchestrator.mcp import McpTools
    from providers.client import ModelClient
    from providers.stream import ModelInfo

__all__ = ["Services"]


@dataclass
class Services:
    definitions: Definitions
    storage: Storage
    bus: EventBus
    hooks: Hooks
    client: ModelClient
    settings: RuntimeSettings
    redactor: SecretScopes  # which secrets are redacted where: `for_thread(id)`, `everywhere()`
    runtime_env: dict[str, EnvValue]
    owner: str  # this process's lease owner id
    heartbeat: Heartbeat  # renews the leases of this process's executions
    # (prompt, model alias) -> its model and tools, built once per runtime (schemas cost milliseconds)
    toolsets: dict[tuple[str, str | None], tuple[ModelInfo, Toolset]] = field(default_factory=dict)
    mcp: McpTools | None = None  # the config's MCP servers, started on first use
    clock: Callable[[], float] = time.time  # waiting calls' request and expiry times (tests pass a fake one)

    async def store_message(
        self,
        state: ThreadState,
        message: Message,
        *,
        event: MessageEventName = "message_created",
        thread: ThreadRecord | None = None,
    ) -> Message:
        """Create-message lifecycle: hook, one transaction (the message, its event, what else is pending),
        live history, hook."""
        [stored] = await self.store_messages(state, [message], event=event, thread=thread)
        return stored

    async def store_messages(
        self,
        state: ThreadState,
        messages: list[Message],
        *,
        event: MessageEventName = "message_created",
        thread: ThreadRecord | None = None,
    ) -> list[Message]:
        """`store_message` for messages ready together (tool results finished at once): each gets
        its hooks and its event, all are written in one transaction."""
        messages = [await self.hooks.transform("before_create_message", state, m) for m in messages]
        execution = state.execution
        lease = execution.lease_token if execution else None
        write = StepWrite(thread_id=messages[0].thread_id, new_messages=messages, thread=thread, lease_token=lease)
        self.bus.prepare(write, event)  # the bus's steps around our own await: one coroutine fewer held
        try:
            stored = await self.storage.commit(write)
        except BaseException as exc:
            self.bus.not_stored(write, exc)
            raise
        self.bus.stored(write, stored)
        for message in stored:
            if execution is not None:
                execution.message_history.append(message)
            await self.hooks.call("after_create_message", state, message)
        return stored

    async def save_thread(self, thread: ThreadRecord, *, lease_token: int | None = None) -> None:
        """The thread's row (status, snapshot, usage), with the events pending for it."""
        write = StepWrite(thread_id=thread.id, thread=thread, lease_token=lease_token)
        self.bus.prepare(write)
        try:
            await self.storage.commit(write)
        except BaseException as exc:
            self.bus.not_stored(write, exc)
            raise
        self.bus.stored(write, [])

"""Env values: where `state.env(name)` looks, and keeping secrets out of output.

Resolution order (SPEC): thread, agent defaults, prompt defaults, user account,
runtime instance (config `env:` then the process environment). A value is a
secret unless it was stored with type "text".

What a thread may write (`EnvScope.refusal`): not a name a tool declares
operator-only, nor one the operator configured, unless a tool declares it
thread-scope; for those names the thread level is not read either, so a value
stored there before this rule never shadows the operator's.

Secrets are redacted by scope (`SecretScopes`): a thread's secrets in that
thread's output only, config keys and process secrets everywhere; see
docs/security.md for what a short secret means.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.core.messages import EnvType, EnvValue
from orchestrator.core.secrets import MIN_SECRET_LEN
from orchestrator.definitions.variables import DeclaredScope
from orchestrator.storage.base import Storage

if TYPE_CHECKING:
    pass


class EnvNotFoundError(KeyError):
    """No level defines the name. The message lists the places looked in, never values."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EnvWriteRefused(PermissionError):
    """A thread may not set this name: the operator's (see `EnvScope.refusal`). Names it, never a value."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"set_env: {reason}")
        self.name = name
        self.reason = reason


@dataclass
class EnvScope:
    """Everything `state.env` consults for one thread at one moment."""

    storage: Storage
    thread_id: str
    user_id: str | None
    agent_name: str
    agent_env: Mapping[str, str]
    prompt_name: str | None
    prompt_env: Mapping[str, str]
    runtime_env: Mapping[str, EnvValue]  # from config `env:`
    use_process_env: bool = True
    declared: Mapping[str, DeclaredScope] = field(default_factory=dict)  # `declared_scopes` of the tools

    def refusal(self, name: str) -> str | None:
        """Why this thread may not set `name` (and so why a value stored on it is not read); None if it may.

        The operator's settings cannot be shadowed from a thread: a name a tool declares operator-only,
        or one the operator configured (config `runtime.env`, the process environment) unless a tool
        declares it thread-scope. Says which, never a value."""
        declared = self.declared.get(name)
        if declared is not None:
            if declared.scope == "thread":
                return None
            return (
                f"{name!r} is operator-only: tool {declared.tool!r} declares it with scope='operator', so only the "
                "operator sets it (config runtime.env, the process environment, agent or prompt env defaults, "
                "Runtime.set_user_env), never a thread"
            )
        if self._operator_configured(name):
            return (
                f"{name!r} is configured by the operator (config runtime.env or the process environment) and a "
                "thread may not override it; a tool that means threads to set it declares "
                f"VariableDefinition(name={name!r}, scope='thread')"
            )
        return None

    def _thread_may_set(self, name: str) -> bool:
        declared = self.declared.get(name)
        if declared is not None:
            return declared.scope == "thread"
        return not self._operator_configured(name)

    def _operator_configured(self, name: str) -> bool:
        return name in self.runtime_env or (self.use_process_env and name in os.environ)

    async def lookup(self, name: str) -> EnvValue:
        return (await self.resolve(name))[0]

    async def resolve(self, name: str) -> tuple[EnvValue, bool]:
        """The value, and whether it came from the process environment (a secret of
        the whole process, not of this thread: redacted everywhere)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"env: name must be a non-empty string, got {name!r}")
        if self._thread_may_set(name):  # else a value stored on the thread (before the rule) is kept, never read
            found = await self.storage.get_env("thread", self.thread_id, name)
            if found is not None:
                return found, False
        if name in self.agent_env:
            return EnvValue(name=name, value=self.agent_env[name], type="secret"), False
        if name in self.prompt_env:
            return EnvValue(name=name, value=self.prompt_env[name], type="secret"), False
        if self.user_id is not None:
            found = await self.storage.get_env("user", self.user_id, name)
            if found is not None:
                return found, False
        if name in self.runtime_env:
            return self.runtime_env[name], True
        if self.use_process_env and name in os.environ:
            return EnvValue(name=name, value=os.environ[name], type="secret"), True
        raise EnvNotFoundError(f"env value {name!r} is not set; looked in: {', '.join(self._places(name))}")

    def _places(self, name: str) -> list[str]:
        thread = f"thread {self.thread_id}" + ("" if self._thread_may_set(name) else " (not read: operator-only)")
        places = [thread, f"agent {self.agent_name!r} defaults"]
        if self.prompt_name:
            places.append(f"prompt {self.prompt_name!r} defaults")
        places.append(f"user {self.user_id!r}" if self.user_id else "user account (thread has no user)")
        places.append("runtime config and process environment")
        return places

    async def set(self, name: str, value: str, type: EnvType | None) -> EnvValue:
        if not isinstance(name, str) or not name:
            raise ValueError(f"set_env: name must be a non-empty string, got {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"set_env: value for {name!r} must be a string, got {value.__class__.__name__}")
        if type not in (None, "text", "secret"):
            raise ValueError(f"set_env: type for {name!r} must be 'text' or 'secret', got {type!r}")
        refused = self.refusal(name)
        if refused is not None:
            raise EnvWriteRefused(name, refused)
        if type is None:
            existing = await self.storage.get_env("thread", self.thread_id, name)
            if existing is None and self.user_id is not None:
                existing = await self.storage.get_env("user", self.user_id, name)
            type = existing.type if existing is not None else "secret"
        if type == "secret" and len(value) < MIN_SECRET_LEN:
            raise ValueError(
                f"set_env: secret value for {name!r} must be at least {MIN_SECRET_LEN} characters (a shorter "
                "one cannot be redacted without rewriting ordinary text); store it with type 'text' if it need "
                "not be hidden"
            )
        await self.storage.set_env("thread", self.thread_id, name, value, type)
        return EnvValue(name=name, value=value, type=type)

"""Env values: where `state.env(name)` looks, and keeping secrets out of output.

Resolution order (SPEC): thread, agent defaults, prompt defaults, user account,
runtime instance (config `env:` then the process environment). A value is a
secret unless it was stored with type "text".
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .messages import EnvType, EnvValue
from .storage.base import Storage

REDACTED = "***"
_MIN_SECRET_LEN = 4  # shorter values would redact ordinary words


class EnvNotFoundError(KeyError):
    """No level defines the name. The message lists the places looked in, never values."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Redactor:
    """Replaces every known secret value with `***` in strings and JSON-like data.

    One instance serves a runtime (API keys, secret env values seen so far); the
    cost is one `in` test per secret per string, and nothing when there are none.
    """

    def __init__(self, secrets: list[str] | None = None) -> None:
        self._secrets: set[str] = set()
        for s in secrets or ():
            self.add(s)

    def add(self, value: str | None) -> None:
        if value and len(value) >= _MIN_SECRET_LEN:
            self._secrets.add(value)

    @property
    def active(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        if not self._secrets:
            return value
        for secret in sorted(self._secrets, key=len, reverse=True):  # longest first: no partial leaks
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def data(self, value: Any) -> Any:
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def json(self, value: Any) -> str:
        return self.text(json.dumps(value, default=str))


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

    async def lookup(self, name: str) -> EnvValue:
        if not isinstance(name, str) or not name:
            raise ValueError(f"env: name must be a non-empty string, got {name!r}")
        found = await self.storage.get_env("thread", self.thread_id, name)
        if found is not None:
            return found
        if name in self.agent_env:
            return EnvValue(name=name, value=self.agent_env[name], type="secret")
        if name in self.prompt_env:
            return EnvValue(name=name, value=self.prompt_env[name], type="secret")
        if self.user_id is not None:
            found = await self.storage.get_env("user", self.user_id, name)
            if found is not None:
                return found
        if name in self.runtime_env:
            return self.runtime_env[name]
        if self.use_process_env and name in os.environ:
            return EnvValue(name=name, value=os.environ[name], type="secret")
        raise EnvNotFoundError(f"env value {name!r} is not set; looked in: {', '.join(self._places())}")

    def _places(self) -> list[str]:
        places = [f"thread {self.thread_id}", f"agent {self.agent_name!r} defaults"]
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
        if type is None:
            existing = await self.storage.get_env("thread", self.thread_id, name)
            if existing is None and self.user_id is not None:
                existing = await self.storage.get_env("user", self.user_id, name)
            type = existing.type if existing is not None else "secret"
        await self.storage.set_env("thread", self.thread_id, name, value, type)
        return EnvValue(name=name, value=value, type=type)

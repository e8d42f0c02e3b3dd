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

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ahocorasick_rs import AhoCorasick, MatchKind

from .messages import EnvType, EnvValue
from .storage.base import Storage

if TYPE_CHECKING:
    from .definitions import ToolDefinition, VariableScope

REDACTED = "***"
MIN_SECRET_LEN = 4  # a shorter secret cannot be redacted without rewriting ordinary text: set_env refuses it
WHOLE_WORD_BELOW = 8  # a secret shorter than this is redacted only where it stands as a whole word


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


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


class Redactor:
    """Replaces a fixed set of secret values with `***` in strings and JSON-like data.

    Compiled once (Aho-Corasick automata), so a text costs one pass whatever the
    number of secrets. Secrets of `WHOLE_WORD_BELOW` characters or more are
    replaced wherever they occur (longest first, so no part of a longer secret
    survives); shorter ones only as a whole word, because a short value such as
    `order` also occurs inside ordinary words (`border`, `order_id`) that are
    not the secret. Values under `MIN_SECRET_LEN` are not matched at all.

    Each secret is also matched in every escaped form a dump gives it (JSON,
    with and without `ensure_ascii`; Python's `repr` and `ascii`), because a
    text is often a structure someone serialised before it reached us: a tool's
    JSON result, a traceback quoting a repr. A secret holding `"`, `\\`, a
    newline or a non-ASCII character is not written as itself there.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        values = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LEN}
        long = sorted({f for s in values if len(s) >= WHOLE_WORD_BELOW for f in escaped_forms(s)})
        short = sorted({f for s in values if len(s) < WHOLE_WORD_BELOW for f in escaped_forms(s)} - set(long))
        self._long = AhoCorasick(long, matchkind=MatchKind.LeftmostLongest) if long else None
        self._short = AhoCorasick(short) if short else None
        self._size = len(values)

    @property
    def active(self) -> bool:
        return self._size > 0

    def __len__(self) -> int:
        return self._size

    def text(self, value: str) -> str:
        if self._long is not None:
            value = _replace(value, self._long.find_matches_as_indexes(value))
        if self._short is not None:
            value = _replace(value, _whole_words(value, self._short.find_matches_as_indexes(value, overlapping=True)))
        return value

    def data(self, value: Any) -> Any:
        if not self._size:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(k) if isinstance(k, str) else k: self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def json(self, value: Any) -> str:
        """`value` as JSON: its strings redacted before the dump, and the dump again (what `default=str` made)."""
        return self.text(json.dumps(self.data(value), default=str))


def escaped_forms(secret: str) -> set[str]:
    """`secret` as it reads inside a JSON string or a Python repr of a longer string.

    A repr quotes with `'` (escaping any `'` inside) unless the string holds `'` and no `"`;
    both quotings are covered, each of the secret followed by marker quotes that force it."""
    forms = {secret}
    for ascii_only in (True, False):
        forms.add(json.dumps(secret, ensure_ascii=ascii_only)[1:-1])
    for show in (repr, ascii):
        forms.add(show(secret + "'\"")[1:-4])  # quoted with ': the marker reads \'" before the closing quote
        if '"' not in secret:
            forms.add(show(secret + "'")[1:-2])  # quoted with ": the marker reads ' before it
    return forms


def _replace(text: str, matches: Iterable[tuple[int, int, int]]) -> str:
    parts: list[str] = []
    last = 0
    for _, start, end in matches:
        parts.append(text[last:start])
        parts.append(REDACTED)
        last = end
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _whole_words(text: str, matches: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Of overlapping matches, those standing as whole words; leftmost, then longest, never overlapping."""
    kept: list[tuple[int, int, int]] = []
    last = 0
    for match in sorted(matches, key=lambda m: (m[1], m[1] - m[2])):
        _, start, end = match
        if start < last:
            continue
        if (start > 0 and _is_word_char(text[start - 1])) or (end < len(text) and _is_word_char(text[end])):
            continue
        kept.append(match)
        last = end
    return kept


_NOTHING = Redactor()


class SecretScopes:
    """Which secrets are redacted where.

    Global secrets (config API keys, server tokens, values read from the process
    environment) are redacted in everything. A thread's secrets (its own and
    its user's secret env values, agent and prompt defaults it read) only in
    that thread's output, and in the threads it runs inside (a sub-agent's
    result becomes its parent's tool result): one user's secret never rewrites
    another user's data. Each scope keeps one compiled `Redactor`, rebuilt only
    when a new secret joins it; a thread's scope is forgotten with its event
    channel (`EventBus.detach`) and refilled as its next execution reads env.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._global: set[str] = set()
        self._threads: dict[str, set[str]] = {}
        self._parents: dict[str, str] = {}
        self._compiled: dict[str | None, Redactor] = {}  # thread id (None: global only) -> matcher
        self._everywhere: Redactor | None = None
        for value in secrets:
            self.add(value)

    def add(self, value: str | None, thread_id: str | None = None) -> None:
        """Redact `value` in `thread_id`'s output (and its parents'), or everywhere with no thread."""
        if not value or len(value) < MIN_SECRET_LEN or value in self._global:
            return
        if thread_id is None:
            self._global.add(value)
            self._compiled.clear()
            self._everywhere = None
            return
        seen: set[str] = set()
        while thread_id is not None and thread_id not in seen:
            seen.add(thread_id)
            scope = self._threads.setdefault(thread_id, set())
            if value not in scope:
                scope.add(value)
                self._compiled.pop(thread_id, None)
                self._everywhere = None
            thread_id = self._parents.get(thread_id)

    def nest(self, child_id: str, parent_id: str | None) -> None:
        """`child_id` runs inside `parent_id`: its secrets are redacted in the parent too."""
        if parent_id is not None and parent_id != child_id:
            self._parents[child_id] = parent_id

    def forget(self, thread_id: str) -> None:
        self._parents.pop(thread_id, None)
        if self._threads.pop(thread_id, None) is not None:
            self._compiled.pop(thread_id, None)
            self._everywhere = None

    def for_thread(self, thread_id: str | None) -> Redactor:
        """The matcher for output belonging to `thread_id`: global secrets and the thread's own."""
        own = self._threads.get(thread_id) if thread_id is not None else None
        key = thread_id if own else None  # a thread without secrets of its own shares the global matcher
        compiled = self._compiled.get(key)
        if compiled is None:
            values = self._global | own if own else self._global
            compiled = Redactor(values) if values else _NOTHING
            self._compiled[key] = compiled
        return compiled

    def everywhere(self) -> Redactor:
        """Every known secret, for output that belongs to no one thread: the operator's logs."""
        if self._everywhere is None:
            self._everywhere = Redactor(self._global.union(*self._threads.values()))
        return self._everywhere


@dataclass(frozen=True)
class DeclaredScope:
    """Who may set an env name a tool declares (`VariableDefinition.scope`), and the tool that says so."""

    scope: VariableScope
    tool: str


def declared_scopes(tools: Mapping[str, ToolDefinition]) -> dict[str, DeclaredScope]:
    """Each env name the tools declare, with its scope. Tools that disagree are a load error
    (`scope_conflicts`); for definitions built in code, "operator" wins, the safe side."""
    found: dict[str, DeclaredScope] = {}
    for tool_name, tool in tools.items():
        for variable in tool.variables:
            seen = found.get(variable.name)
            if seen is None or (seen.scope == "thread" and variable.scope == "operator"):
                found[variable.name] = DeclaredScope(variable.scope, tool_name)
    return found


def scope_conflicts(tools: Mapping[str, ToolDefinition]) -> list[tuple[str, str, str]]:
    """(tool, name, other tool) for each tool declaring a name with a scope another tool's differs from."""
    first: dict[str, tuple[str, VariableScope]] = {}
    conflicts: list[tuple[str, str, str]] = []
    for tool_name, tool in tools.items():
        for variable in tool.variables:
            earlier = first.setdefault(variable.name, (tool_name, variable.scope))
            if earlier[1] != variable.scope:
                conflicts.append((tool_name, variable.name, earlier[0]))
    return conflicts


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

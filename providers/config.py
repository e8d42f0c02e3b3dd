"""Providers and models from YAML, checked when loaded.

Errors point at the file and line a person has to edit: the YAML is read with node
marks (`yaml_source.py`) and pydantic's error locations are mapped back to those lines.
API keys are `${VAR}` references resolved only when a provider is used: a config
naming five providers works with the one key you have.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from providers.mcp_config import MCP_NAME, McpServerConfig
from providers.provider_types import OFFLINE_TYPES, check_type, did_you_mean
from providers.stream import ModelInfo
from providers.yaml_source import ConfigError, Marks, deep_merge, read_yaml, where

__all__ = [
    "BUILTIN_TEST_ALIAS",
    "ConfigError",
    "McpServerConfig",
    "IN_PROCESS_BASE_URL",
    "ModelConfig",
    "Price",
    "ProviderConfig",
    "ProvidersConfig",
    "ResolvedProvider",
    "RetryPolicy",
    "SCRIPTED_API_KEY",
    "SCRIPTED_BASE_URL",
    "config_from_dict",
    "load_config",
    "register_section",
]

SCRIPTED_BASE_URL = "http://scripted.invalid/v1"
"""Where a `type: scripted` provider sends requests; a ScriptedModel mounted there answers."""
SCRIPTED_API_KEY = "scripted-dummy-key"
IN_PROCESS_BASE_URL = "http://in-process.invalid/v1"
"""Where `type: offline` providers send requests; answered in this process (see `providers.offline`)."""
BUILTIN_TEST_ALIAS = "test"
"""A model alias every config has unless it defines its own: `providers.test_model.TestModel`, offline."""
_BUILTIN_PROVIDER = "offline"
DEFAULT_TOTAL_TIMEOUT = 600.0
"""`total_timeout`: ten minutes, the whole-request timeout the OpenAI and Anthropic SDKs default to; a model
writing its longest answer (a reasoning model at 32k+ tokens) may need more, set per model."""
DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024
"""`max_answer_bytes`: 16 MiB, some 30 times the longest answer a model's output limit allows (128k tokens,
about 0.5 MB), and small enough that a flood stops long before it threatens a host's memory."""


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_KEY_PREFIXES = ("sk-", "sk_", "sk-ant-", "AIza", "xai-", "gsk_", "AKIA", "ghp_", "hf_", "pk-", "rk_")
_KEY_LIKE = re.compile(r"^[A-Za-z0-9_\-\.+/=]{24,}$")
_SECRET_FIELD = re.compile(r"key|secret|token|password", re.IGNORECASE)
# Provider families whose tool schemas follow Anthropic's or Gemini's dialect.
_DIALECTS = {"anthropic": "anthropic", "gemini": "gemini", "vertex_ai": "gemini"}


_LITERAL_KEY = (
    "looks like a literal API key; keys belong in the environment: write a reference "
    "such as ${OPENAI_API_KEY} and set that variable"
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RetryPolicy(_Strict):
    attempts: int = Field(3, ge=1, le=20, description="tries per model, the first included")
    backoff: float = Field(0.5, ge=0, description="first wait in seconds; doubles each retry")
    max_wait: float = Field(30.0, ge=0, description="cap on any single wait, Retry-After included")


class Price(_Strict):
    """USD per million tokens."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)


class ProviderConfig(_Strict):
    type: str | None = Field(None, description="LiteLLM provider family; defaults to the provider's key")
    api_key: str | None = None
    base_url: str | None = None
    api_version: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict, description="extra litellm arguments, e.g. aws_region_name")
    stream: Literal["auto", "litellm"] = Field(
        "auto",
        description=(
            "auto: OpenAI-wire, Anthropic and Gemini providers are read by the runtime "
            "(LiteLLM still builds the request); "
            "litellm: always litellm.acompletion"
        ),
    )
    max_in_flight: int = Field(
        100,
        ge=1,
        description=(
            "requests to this provider at once per runtime; more wait their turn in the runtime "
            "(LiteLLM's HTTP pool holds 100 connections: past them, requests would wait inside it)"
        ),
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None:
            check_type(value)
        return value

    @field_validator("api_key")
    @classmethod
    def _key_is_reference(cls, value: str | None) -> str | None:
        if value is not None and _looks_like_key(value):
            raise ValueError(_LITERAL_KEY)
        return value

    @field_validator("headers", "params")
    @classmethod
    def _no_literal_secrets(cls, values: dict[str, Any]) -> dict[str, Any]:
        return _no_literal_secrets(values)


class ModelConfig(_Strict):
    provider: str
    model: str
    fallbacks: list[str] = Field(default_factory=list)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    timeout: float = Field(
        60.0, gt=0, description="seconds the provider may stay silent: before the first chunk and between chunks"
    )
    total_timeout: float = Field(
        DEFAULT_TOTAL_TIMEOUT,
        gt=0,
        description="seconds one answer may take in all, from the request to its end, however steadily it streams",
    )
    max_answer_bytes: int = Field(
        DEFAULT_MAX_ANSWER_BYTES,
        ge=1024,
        description="bytes (UTF-8) of one answer's text, reasoning, refusal, tool arguments and provider blocks",
    )
    params: dict[str, Any] = Field(default_factory=dict)
    price: Price | None = None
    supports_images: bool = False
    supports_tools: bool = True


@dataclass(frozen=True, slots=True)
class ResolvedProvider:
    """A provider with its `${VAR}` references filled in, ready for one call."""

    name: str
    type: str
    api_key: str | None
    base_url: str | None
    api_version: str | None
    headers: dict[str, str]
    params: dict[str, Any]
    key_env: str | None  # the variable the key came from, for error messages
    stream: str = "auto"  # ProviderConfig.stream

    def secrets(self) -> list[str]:
        """Values that must never appear in errors or recordings."""
        found = [self.api_key] if self.api_key else []
        found += [v for k, v in self.params.items() if isinstance(v, str) and _SECRET_FIELD.search(k)]
        found += [v for k, v in self.headers.items() if _SECRET_FIELD.search(k) or k.lower() == "authorization"]
        return [s for s in found if len(s) >= 4 and s != SCRIPTED_API_KEY]


class ProvidersConfig(_Strict):
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    models: dict[str, ModelConfig] = Field(default_factory=dict)
    default_model: str | None = None
    runtime: dict[str, Any] = Field(
        default_factory=dict
    )  # the runtime's settings, validated by orchestrator.core.settings
    server: dict[str, Any] = Field(
        default_factory=dict
    )  # the HTTP server's settings (e.g. tokens), validated by orchestrator.server
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)  # tools from MCP servers (orchestrator.mcp)

    @model_validator(mode="before")
    @classmethod
    def _builtin_test_alias(cls, data: Any) -> Any:
        """Add `test` (on an `offline` provider) unless the config has its own."""
        if not isinstance(data, dict) or not isinstance(data.get("models", {}), dict):
            return data
        providers = data.get("providers") or {}
        if BUILTIN_TEST_ALIAS in (data.get("models") or {}) or not isinstance(providers, dict):
            return data
        own = providers.get(_BUILTIN_PROVIDER)
        if own is not None and not (isinstance(own, dict) and own.get("type") == "offline"):
            return data  # the config's own `offline` provider is something else: no built-in alias
        builtin = {"provider": _BUILTIN_PROVIDER, "model": "test", "retry": {"attempts": 1}, "timeout": 30}
        return {
            **data,
            "providers": {**providers, _BUILTIN_PROVIDER: own or {"type": "offline"}},
            "models": {**(data.get("models") or {}), BUILTIN_TEST_ALIAS: builtin},
        }

    @model_validator(mode="after")
    def _references_hold(self, info: ValidationInfo) -> ProvidersConfig:
        if info.context and info.context.get("skip_references"):
            return self  # load_config reports these itself, with line numbers
        problems = self.reference_problems()
        if problems:
            raise ValueError("; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in problems))
        return self

    def reference_problems(
        self, *, defined_providers: set[str] | None = None, defined_models: set[str] | None = None
    ) -> list[tuple[tuple[str | int, ...], str]]:
        """Cross-references pydantic cannot see: providers, fallbacks, default_model.

        `defined_*`: names that exist even if their entry is invalid (reported on its own)."""
        providers = defined_providers if defined_providers is not None else set(self.providers)
        models = defined_models if defined_models is not None else set(self.models)
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for name, provider in self.providers.items():
            if provider.type is None:
                try:
                    check_type(name)
                except ValueError as exc:
                    why = f"{exc}: a provider without `type:` is named after its LiteLLM family; add `type: ...`"
                    problems.append((("providers", name), why))
        for alias, model in self.models.items():
            if model.provider not in providers:
                hint = did_you_mean(model.provider, providers)
                why = f"unknown provider '{model.provider}'{hint} (known: {_names(providers)})"
                problems.append((("models", alias, "provider"), why))
            for i, target in enumerate(model.fallbacks):
                if target not in models:
                    why = f"unknown fallback alias '{target}'{did_you_mean(target, models)} (known: {_names(models)})"
                    problems.append((("models", alias, "fallbacks", i), why))
        problems += self._cycles()
        problems += self._offline_problems()
        for name in self.mcp_servers:
            if not MCP_NAME.match(name):
                problems.append(
                    (("mcp_servers", name), f"server name {name!r} may hold only letters, digits, '_' and '-'")
                )
        if self.default_model is not None and self.default_model not in models:
            hint = did_you_mean(self.default_model, models)
            why = f"default_model '{self.default_model}' is not defined under models{hint} (known: {_names(models)})"
            problems.append((("default_model",), why))
        return problems

    def _offline_problems(self) -> list[tuple[tuple[str | int, ...], str]]:
        from providers.offline import describe_answerer

        problems: list[tuple[tuple[str | int, ...], str]] = []
        for alias, model in self.models.items():
            offline = model.provider in self.providers and self.provider_type(model.provider) == "offline"
            if offline and model.model:  # an empty name is the invalid entry reported on its own
                problem = describe_answerer(model.model)
                if problem:
                    problems.append((("models", alias, "model"), problem))
        return problems

    def add_offline_model(self, model: str) -> str:
        """An alias answering with `model` offline (a script file or `module:function`), for `--model`."""
        from providers.offline import describe_answerer

        problem = describe_answerer(model)
        if problem:
            raise ConfigError(
                f"--model {model}: not a model alias{did_you_mean(model, self.models)} (known: {_names(self.models)}) "
                f"and not an offline model: {problem}"
            )
        candidates = (_BUILTIN_PROVIDER, f"_{_BUILTIN_PROVIDER}")
        name = next(n for n in candidates if n not in self.providers or self.provider_type(n) == "offline")
        self.providers.setdefault(name, ProviderConfig(type="offline"))
        self.models[model] = ModelConfig(provider=name, model=model, retry=RetryPolicy(attempts=1))
        return model

    def _cycles(self) -> list[tuple[tuple[str | int, ...], str]]:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for start in self.models:
            path, seen = [start], {start}
            stack = [(start, iter(self.models[start].fallbacks))]
            while stack:
                _, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    continue
                if nxt == start:
                    cycle = " -> ".join([*path, start])
                    problems.append((("models", start, "fallbacks"), f"fallback cycle: {cycle}"))
                    break
                if nxt in self.models and nxt not in seen:
                    seen.add(nxt)
                    path.append(nxt)
                    stack.append((nxt, iter(self.models[nxt].fallbacks)))
            if problems:
                break  # one cycle report is enough; every member would repeat it
        return problems

    # -- lookups -------------------------------------------------------------

    def model(self, alias: str | None) -> tuple[str, ModelConfig]:
        name = alias if alias is not None else self.default_model
        if name is None:
            raise ConfigError(f"no model alias given and no default_model set (known: {_names(self.models)})")
        if name not in self.models:
            hint = did_you_mean(name, self.models)
            raise ConfigError(f"unknown model alias '{name}'{hint} (known: {_names(self.models)})")
        return name, self.models[name]

    def provider_type(self, provider: str) -> str:
        return self.providers[provider].type or provider

    def model_info(self, alias: str | None) -> ModelInfo:
        name, model = self.model(alias)
        ptype = self.provider_type(model.provider)
        return ModelInfo(
            alias=name,
            provider=model.provider,
            provider_type=ptype,
            model=litellm_model(ptype, model.model),
            dialect=_dialect(ptype, model.model),
            supports_images=model.supports_images,
            supports_tools=model.supports_tools,
        )

    def fallback_chain(self, alias: str | None) -> list[str]:
        """The alias then its fallbacks in order (transitively, each once)."""
        name, _ = self.model(alias)
        chain: list[str] = []
        todo = [name]
        while todo:
            current = todo.pop(0)
            if current not in chain:
                chain.append(current)
                todo.extend(self.models[current].fallbacks)
        return chain

    def resolve_provider(self, name: str, *, environ: Mapping[str, str] | None = None) -> ResolvedProvider:
        """Fill `${VAR}` references now; a missing variable names itself and this provider."""
        env = os.environ if environ is None else environ
        provider = self.providers[name]
        ptype = provider.type or name
        if ptype == "scripted":
            return ResolvedProvider(
                name,
                "scripted",
                SCRIPTED_API_KEY,
                provider.base_url or SCRIPTED_BASE_URL,
                None,
                {},
                {},
                None,
                provider.stream,
            )
        if ptype == "offline":  # read as a scripted (OpenAI wire) stream, served in this process
            return ResolvedProvider(name, "scripted", SCRIPTED_API_KEY, IN_PROCESS_BASE_URL, None, {}, {}, None, "auto")
        ref = _ENV_REF.fullmatch(provider.api_key or "")
        return ResolvedProvider(
            name=name,
            type=ptype,
            api_key=_expand(provider.api_key, env, name, "api_key"),
            base_url=_expand(provider.base_url, env, name, "base_url"),
            api_version=_expand(provider.api_version, env, name, "api_version"),
            headers={k: _expand(v, env, name, f"headers.{k}") or "" for k, v in provider.headers.items()},
            params={
                k: _expand(v, env, name, f"params.{k}") if isinstance(v, str) else v for k, v in provider.params.items()
            },
            key_env=ref.group(1) if ref else None,
            stream=provider.stream,
        )


def litellm_model(provider_type: str, model: str) -> str:
    """LiteLLM's `family/model` string; scripted and offline models speak the OpenAI wire format."""
    family = "openai" if provider_type in OFFLINE_TYPES else provider_type
    return model if model.startswith(f"{family}/") else f"{family}/{model}"


def _dialect(provider_type: str, model: str) -> str:
    if provider_type == "bedrock" and "claude" in model:
        return "anthropic"
    return _DIALECTS.get(provider_type, "openai")


def _names(names: Mapping[str, Any] | set[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def _looks_like_key(value: str) -> bool:
    if _ENV_REF.search(value):
        return False
    return value.startswith(_KEY_PREFIXES) or bool(_KEY_LIKE.match(value) and re.search(r"\d", value))


def _no_literal_secrets(values: dict[str, Any]) -> dict[str, Any]:
    """Keys, tokens and passwords belong in the environment, referenced as `${VAR}`."""
    for key, value in values.items():
        if (
            isinstance(value, str)
            and _looks_like_key(value)
            and (_SECRET_FIELD.search(key) or key.lower() == "authorization")
        ):
            raise ValueError(f"{key}: {_LITERAL_KEY}")
    return values


def _expand(value: str | None, env: Mapping[str, str], provider: str, field: str) -> str | None:
    if value is None:
        return None

    def sub(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if var in env:
            return env[var]
        if default is not None:
            return default
        owner = provider if provider.startswith("mcp server ") else f"provider '{provider}'"
        raise ConfigError(f"environment variable {var} is not set; {owner} needs it for {field}")

    return _ENV_REF.sub(sub, value)


# -- loading -----------------------------------------------------------------


def load_config(*paths: str | Path) -> ProvidersConfig:
    """Read one or more YAML files; later files deep-merge over earlier ones."""
    if not paths:
        raise ConfigError("load_config needs at least one path")
    data: dict[str, Any] = {}
    marks: Marks = {}
    for path in paths:
        loaded, file_marks = read_yaml(Path(path))
        data = deep_merge(data, loaded)
        marks.update(file_marks)
    return _build(data, marks, ", ".join(str(p) for p in paths))


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> ProvidersConfig:
    return _build(dict(data), {}, source)


def register_section(name: str, model: type[BaseModel]) -> None:
    """Validate the top-level `name:` section with `model` when a config loads, so its
    problems are reported with the others, with file and line (e.g. `runtime`)."""
    _SECTIONS[name] = model


_SECTIONS: dict[str, type[BaseModel]] = {}
_Problem = tuple[tuple[Any, ...], str]


def _build(data: dict[str, Any], marks: Marks, source: str) -> ProvidersConfig:
    """Validate everything and report every problem at once, each with file and line."""
    problems: list[_Problem] = []
    try:
        config: ProvidersConfig | None = ProvidersConfig.model_validate(data, context={"skip_references": True})
    except ValidationError as exc:
        config = None
        problems += _pydantic_problems(exc)
    # `test` exists here too: a config with another problem is not told its `default_model: test` is undefined
    partial = config or _valid_part(ProvidersConfig._builtin_test_alias(data))  # type: ignore[operator]
    if partial is not None:
        problems += partial.reference_problems(
            defined_providers=set(_mapping(data.get("providers"))) | set(partial.providers),
            defined_models=set(_mapping(data.get("models"))) | set(partial.models),
        )
    problems += _section_problems(data)
    if problems:
        found = {(where(loc, marks, source), ".".join(map(str, loc)) or "(top level)", msg) for loc, msg in problems}
        lines = [f"{where}: {field}: {msg}" for where, field, msg in sorted(found, key=_line_order)]
        raise ConfigError(f"invalid providers config ({_plural(len(lines))}):\n  " + "\n  ".join(lines))
    assert config is not None
    return config


def _pydantic_problems(exc: ValidationError, prefix: tuple[Any, ...] = ()) -> list[_Problem]:
    out: list[_Problem] = []
    for err in exc.errors():
        msg = err["msg"].removeprefix("Value error, ")
        loc = (*prefix, *err["loc"])
        if err["type"] == "extra_forbidden":
            fields = _fields_at(loc[:-1])
            hint = did_you_mean(str(loc[-1]), fields) if fields else ""
            listed = f"; the fields here: {', '.join(sorted(fields))}" if fields and not hint else ""
            msg = f"unknown field{hint}{listed}"
        out.append((loc, msg))
    return out


def _fields_at(loc: tuple[Any, ...]) -> set[str]:
    """The field names allowed at `loc`, for a did-you-mean on an unknown one."""
    model: type[BaseModel] | None = None
    if not loc:
        model = ProvidersConfig
    elif loc[0] in _SECTIONS and len(loc) == 1:
        model = _SECTIONS[loc[0]]
    elif loc[0] == "providers" and len(loc) == 2:
        model = ProviderConfig
    elif loc[0] == "models" and len(loc) in (2, 3):
        parts: dict[str, type[BaseModel]] = {"retry": RetryPolicy, "price": Price}
        model = ModelConfig if len(loc) == 2 else parts.get(str(loc[2]))
    return set(model.model_fields) if model is not None else set()


def _valid_part(data: dict[str, Any]) -> ProvidersConfig | None:
    """The entries that validate on their own, so cross-references can still be checked."""
    providers, models = {}, {}
    for name, raw in _mapping(data.get("providers")).items():
        try:
            providers[str(name)] = ProviderConfig.model_validate(raw or {})
        except ValidationError:
            pass
    for name, raw in _mapping(data.get("models")).items():
        try:
            models[str(name)] = ModelConfig.model_validate(raw)
        except ValidationError:  # reported already; its references are still worth checking
            if isinstance(raw, dict) and isinstance(raw.get("provider"), str):
                fallbacks = [f for f in raw.get("fallbacks") or [] if isinstance(f, str)]
                models[str(name)] = ModelConfig.model_construct(provider=raw["provider"], model="", fallbacks=fallbacks)
    default = data.get("default_model")
    default = default if isinstance(default, str) else None
    return ProvidersConfig.model_construct(providers=providers, models=models, default_model=default)


def _section_problems(data: dict[str, Any]) -> list[_Problem]:
    out: list[_Problem] = []
    for name, model in _SECTIONS.items():
        raw = data.get(name)
        if raw is None:
            continue
        try:
            model.model_validate(raw)
        except ValidationError as exc:
            out += _pydantic_problems(exc, (name,))
    return out


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _line_order(entry: tuple[str, str, str]) -> tuple[str, int]:
    where = entry[0]
    file, _, line = where.rpartition(", line ")
    return (file, int(line)) if line.isdigit() else (where, 0)


def _plural(count: int) -> str:
    return f"{count} problem{'s' if count != 1 else ''}"

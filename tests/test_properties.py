"""Property tests (hypothesis): tool schemas of generated models, and config loading.

- Any argument model built from the supported types gives, for every dialect,
  a schema meeting that provider's documented constraints (the validators of
  tests/test_schema.py), and data valid for the model validates against it.
- Any well-formed generated providers YAML loads; a mutated one raises
  ConfigError naming the line of the mutation.
"""

from __future__ import annotations

import enum
import itertools
from pathlib import Path
from typing import Any, Literal, Optional

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, create_model
from test_schema import _gemini_as_json_schema, assert_anthropic_tool, assert_gemini, assert_openai_strict

from orchestrator.definitions.schema import (
    check_args_model,
    drop_null_defaults,
    is_strict_compatible,
    native_tool_spec,
    tool_parameters,
)
from providers.config import ConfigError, load_config

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
_names = itertools.count()


# -- generated argument models -------------------------------------------------------


class Shade(str, enum.Enum):  # noqa: UP042 - the spelling users write
    LIGHT = "light"
    DARK = "dark"


_text = st.text(max_size=8)
_floats = st.floats(allow_nan=False, allow_infinity=False, width=32)
_LEAVES: list[tuple[Any, st.SearchStrategy[Any], bool]] = [  # (type, values, gemini-safe)
    (str, _text, True),
    (int, st.integers(-(2**31), 2**31), True),
    (float, _floats, True),
    (bool, st.booleans(), True),
    (Literal["x", "y", "z"], st.sampled_from(["x", "y", "z"]), True),
    (Shade, st.sampled_from(list(Shade)), True),
]


class Typed:
    """A type with a strategy for its valid values and whether every dialect takes it."""

    def __init__(self, tp: Any, values: st.SearchStrategy[Any], gemini: bool, depth: int) -> None:
        self.tp, self.values, self.gemini, self.depth = tp, values, gemini, depth


def _leaf() -> st.SearchStrategy[Typed]:
    return st.sampled_from(_LEAVES).map(lambda t: Typed(t[0], t[1], t[2], 1))


def _compose(children: st.SearchStrategy[Typed]) -> st.SearchStrategy[Typed]:
    def as_list(c: Typed) -> Typed:
        return Typed(list[c.tp], st.lists(c.values, max_size=3), c.gemini, c.depth + 1)  # type: ignore[name-defined]

    def as_record(c: Typed) -> Typed:
        return Typed(dict[str, c.tp], st.dictionaries(_text, c.values, max_size=3), False, c.depth + 1)  # type: ignore[name-defined]

    def as_optional(c: Typed) -> Typed:
        return Typed(Optional[c.tp], st.none() | c.values, c.gemini, c.depth)  # noqa: UP045

    def as_union(pair: tuple[Typed, Typed]) -> Typed:
        a, b = pair
        if a.tp == b.tp:
            return a
        return Typed(a.tp | b.tp, a.values | b.values, a.gemini and b.gemini, max(a.depth, b.depth))

    return st.one_of(
        children.map(as_list),
        children.map(as_record),
        children.map(as_optional),
        st.tuples(children, children).map(as_union),
        st.lists(children, min_size=1, max_size=3).map(_nested),
    )


def _nested(fields: list[Typed]) -> Typed:
    model, values = _model(fields, with_defaults=False)
    return Typed(model, values, all(f.gemini for f in fields), max(f.depth for f in fields) + 1)


def _model(fields: list[Typed], *, with_defaults: bool) -> tuple[type[BaseModel], st.SearchStrategy[Any]]:
    spec: dict[str, Any] = {}
    values: dict[str, st.SearchStrategy[Any]] = {}
    for i, f in enumerate(fields):
        name = f"f{i}"
        if with_defaults and i % 2 == 1:
            spec[name] = (Optional[f.tp], Field(default=None, description=f"field {i}"))  # noqa: UP045
            values[name] = st.none() | f.values
        else:
            spec[name] = (f.tp, Field(description=f"field {i}") if i % 3 == 0 else ...)
            values[name] = f.values
    model = create_model(f"Gen{next(_names)}", **spec)
    return model, st.fixed_dictionaries(values).map(lambda d: model.model_validate(d))


_types = st.recursive(_leaf(), _compose, max_leaves=6).filter(lambda t: t.depth <= 5)


@SETTINGS
@given(fields=st.lists(_types, min_size=1, max_size=5), data=st.data())
def test_generated_models_give_valid_schemas_in_every_dialect(fields: list[Typed], data: st.DataObject) -> None:
    model, instances = _model(fields, with_defaults=True)
    check_args_model(model)
    sample = data.draw(instances).model_dump(mode="json")

    openai = tool_parameters(model, "openai")
    jsonschema.Draft202012Validator.check_schema(openai)
    if is_strict_compatible(openai):
        assert_openai_strict(openai)
    jsonschema.validate(sample, openai)
    assert model.model_validate(drop_null_defaults(model, sample)) == model.model_validate(sample)

    tool = native_tool_spec("generated_tool", "A generated tool", model, "anthropic")
    assert_anthropic_tool(tool)
    jsonschema.validate(sample, tool["input_schema"])

    if all(f.gemini for f in fields):
        gemini = tool_parameters(model, "gemini")
        assert_gemini(gemini)
        jsonschema.validate(sample, _gemini_as_json_schema(gemini))


# -- generated configs -----------------------------------------------------------------

_ident = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
_PROVIDER_TYPES = ["openai", "anthropic", "gemini", "scripted"]


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for name in draw(st.lists(_ident, min_size=1, max_size=3, unique=True)):
        ptype = draw(st.sampled_from(_PROVIDER_TYPES))
        entry: dict[str, Any] = {"type": ptype}
        if ptype != "scripted":
            entry["api_key"] = "${" + f"{name.upper()}_KEY" + "}"
            if draw(st.booleans()):
                entry["base_url"] = f"https://{name}.example.test/v1"
        providers[name] = entry
    aliases = draw(st.lists(_ident, min_size=1, max_size=4, unique=True))
    models: dict[str, Any] = {}
    for i, alias in enumerate(aliases):
        model: dict[str, Any] = {"provider": draw(st.sampled_from(sorted(providers))), "model": f"m-{alias}"}
        if draw(st.booleans()):
            model["retry"] = {
                "attempts": draw(st.integers(1, 20)),
                "backoff": draw(st.floats(0, 5)),
                "max_wait": draw(st.floats(0, 60)),
            }
        if draw(st.booleans()):
            model["timeout"] = draw(st.floats(0.1, 600))
        if i + 1 < len(aliases) and draw(st.booleans()):
            model["fallbacks"] = [aliases[i + 1]]  # forward only: never a cycle
        if draw(st.booleans()):
            model["price"] = {"input": draw(st.floats(0, 100)), "output": draw(st.floats(0, 100))}
        models[alias] = model
    return {"providers": providers, "models": models, "default_model": draw(st.sampled_from(aliases))}


def _write(tmp: Path, data: dict[str, Any] | str) -> tuple[Path, str]:
    text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    path = tmp / f"gen{next(_names)}.yaml"
    path.write_text(text)
    return path, text


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@SETTINGS
@given(config=configs())
def test_generated_configs_load(config: dict[str, Any], tmp_path: Path) -> None:
    path, _ = _write(tmp_path, config)
    loaded = load_config(path)
    assert set(loaded.models) == set(config["models"]) | {"test"}  # + the built-in offline alias
    assert loaded.default_model == config["default_model"]
    for alias, model in config["models"].items():
        assert loaded.models[alias].provider == model["provider"]
        if "retry" in model:
            assert loaded.models[alias].retry.attempts == model["retry"]["attempts"]
        assert loaded.fallback_chain(alias)[0] == alias


def _mutate(config: dict[str, Any], kind: str, pick: int) -> tuple[dict[str, Any] | str, str]:
    """Break `config` one way; returns it and a text found on the line the error must name."""
    alias = sorted(config["models"])[pick % len(config["models"])]
    provider = sorted(config["providers"])[pick % len(config["providers"])]
    model = config["models"][alias]
    if kind == "unknown_model_field":
        model["temprature"] = 0.5
        return config, "temprature"
    if kind == "unknown_provider_field":
        config["providers"][provider]["api_kee"] = "x"
        return config, "api_kee"
    if kind == "unknown_provider":
        model["provider"] = "nowhere_provider"
        return config, "nowhere_provider"
    if kind == "bad_attempts":
        model["retry"] = {"attempts": 0}
        return config, "attempts: 0"  # generated attempts are >= 1: this line is unique
    if kind == "literal_key":
        config["providers"][provider]["api_key"] = "sk-proj-abcdefghijklmnop0123456789"
        return config, "sk-proj-"
    if kind == "unknown_fallback":
        model["fallbacks"] = ["no_such_alias"]
        return config, "no_such_alias"
    if kind == "bad_timeout":
        model["timeout"] = "soon"
        return config, "soon"
    text = yaml.safe_dump(config, sort_keys=False)
    lines = text.splitlines()
    at = 1 + pick % (len(lines) - 1)
    lines.insert(at, "  : : [unclosed")
    return "\n".join(lines) + "\n", "[unclosed"


_KINDS = [
    "unknown_model_field",
    "unknown_provider_field",
    "unknown_provider",
    "bad_attempts",
    "literal_key",
    "unknown_fallback",
    "bad_timeout",
    "broken_yaml",
]


@SETTINGS
@given(config=configs(), kind=st.sampled_from(_KINDS), pick=st.integers(0, 100))
def test_mutated_configs_raise_config_error_naming_the_line(
    config: dict[str, Any], kind: str, pick: int, tmp_path: Path
) -> None:
    broken, needle = _mutate(config, kind, pick)
    path, text = _write(tmp_path, broken)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    line = _line_of(text, needle)
    assert str(path) in message, message
    if kind == "broken_yaml":  # the parser reports where it noticed, at or just after the bad line
        assert any(f"line {n}" in message for n in (line, line + 1)), (message, line)
    else:
        assert f"line {line}:" in message, (message, line, text)

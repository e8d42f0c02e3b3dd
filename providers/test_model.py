"""`test`: a model that exercises an agent's tools with no key and no network.

Like PydanticAI's TestModel. On the first step of a turn it calls every
function tool the request offers, once, with arguments generated from the
tool's JSON schema; on the next step it answers with a short text naming the
results. A turn starts after the side's last answer that called no tools, so
the model is stateless (each request shows where it is) and a turn takes two
steps at most: a `dual_ai` agent on `test` ends by its end tool (called on the
first step) or by `max_session_turns`.

The arguments are valid under the schema and deterministic: the same schema and
seed give the same values. The seed is the request's `seed` parameter (set it
with `params: {seed: 7}` on the model), 0 by default. A string `pattern` is
honoured by building a match from the expression's parse tree (literals,
classes, repeats, groups, alternatives); negated classes and backreferences
are not covered, and such a field gets a plain word.

A request with a `response_format` of type `json_schema` (a prompt with a typed
`output`) gets, instead of the text, a JSON value valid under that schema, made
the same way as tool arguments: a typed prompt runs offline end to end.

The answer is a `ScriptedResponse`, served as OpenAI-wire SSE bytes by
`providers.scripted`, so the production request builder and parser run.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from typing import Any, Literal, overload

from providers.scripted import ScriptedCall, ScriptedResponse

__all__ = ["TestModel", "example_arguments"]

_MAX_DEPTH = 6
_RESULT_CHARS = 60


class TestModel:
    """Answers one OpenAI Chat Completions request body (see the module doc)."""

    __test__ = False  # not a pytest class

    def __call__(self, body: dict[str, Any]) -> ScriptedResponse:
        messages: list[dict[str, Any]] = body.get("messages") or []
        turn = _current_turn(messages)
        tools = [t["function"] for t in body.get("tools") or [] if t.get("type") == "function" and "function" in t]
        given_seed = body.get("seed")
        seed = given_seed if isinstance(given_seed, int) else 0
        typed = _typed_answer(body.get("response_format"), seed)
        if any(m.get("role") == "assistant" and m.get("tool_calls") for m in turn):
            return ScriptedResponse(text=typed or _results_text(turn))
        if tools:
            calls = [
                ScriptedCall(t["name"], example_arguments(t.get("parameters") or {}, seed=seed, salt=t["name"]))
                for t in tools
            ]
            return ScriptedResponse(tool_calls=calls)
        said = next((_text(m) for m in reversed(turn) if m.get("role") == "user"), "")
        return ScriptedResponse(text=typed or f"test model: no tools offered; last message: {_short(said)}")


def _typed_answer(response_format: Any, seed: int) -> str | None:
    """A JSON value valid under a `json_schema` response format, as text; None without one."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        return None
    name = spec.get("name")
    value = example_arguments(spec["schema"], seed=seed, salt=name if isinstance(name, str) else "output")
    return json.dumps(value, ensure_ascii=False)


def _current_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages after this side's last answer that called no tools."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            return messages[i + 1 :]
    return messages


def _results_text(turn: list[dict[str, Any]]) -> str:
    names = {c["id"]: c["function"]["name"] for m in turn for c in m.get("tool_calls") or [] if "function" in c}
    parts = [
        f"{names.get(m.get('tool_call_id'), m.get('name') or 'tool')} -> {_short(_text(m))}"
        for m in turn
        if m.get("role") == "tool"
    ]
    return "test model: " + ("; ".join(parts) if parts else "no tool results")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _short(text: str) -> str:
    text = " ".join(text.split())
    return json.dumps(text if len(text) <= _RESULT_CHARS else text[: _RESULT_CHARS - 3] + "...", ensure_ascii=False)


# -- arguments from a JSON schema -----------------------------------------------


def example_arguments(schema: dict[str, Any], *, seed: int = 0, salt: str = "") -> dict[str, Any]:
    """A value valid under `schema` (an object schema), the same for the same seed and salt."""
    rng = random.Random(seed * 1_000_003 + zlib.crc32(salt.encode()))
    value = _Generator(schema, rng).value(schema, 0)
    return value if isinstance(value, dict) else {}


class _Generator:
    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self._root = root
        self._rng = rng

    def value(self, schema: Any, depth: int) -> Any:
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return None
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self._rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if schema.get(key):
                choices = [s for s in schema[key] if not (isinstance(s, dict) and s.get("type") == "null")] or schema[
                    key
                ]
                return self.value(self._rng.choice(choices), depth + 1)
        if schema.get("allOf"):
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(self._resolve(part["$ref"]) if isinstance(part, dict) and "$ref" in part else part)
            return self.value(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "string"
        return getattr(self, f"_{kind}", self._null)(schema, depth)

    def _resolve(self, ref: str) -> dict[str, Any]:
        node: Any = self._root
        for part in ref.removeprefix("#/").split("/"):
            node = node.get(part, {}) if isinstance(node, dict) else {}
        return node if isinstance(node, dict) else {}

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        return {name: self.value(sub, depth + 1) for name, sub in props.items()}

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        low = int(schema.get("minItems", 1))
        high = int(schema.get("maxItems", max(low, 2)))
        count = min(max(low, 1), high) if high >= low else low
        items: list[Any] = []
        for _ in range(count * 4):
            if len(items) == count:
                break
            item = self.value(schema.get("items") or {"type": "string"}, depth + 1)
            if not schema.get("uniqueItems") or item not in items:
                items.append(item)
        return items

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        fmt = schema.get("format")
        if fmt in _FORMATS:
            return _FORMATS[fmt]
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        word = self._rng.choice(_WORDS)
        pattern = schema.get("pattern")
        if pattern:
            for candidate in (
                word,
                f"{word.upper()}{self._rng.randint(1000, 9999)}",
                str(self._rng.randint(0, 99999)),
                "a",
                "A1",
            ):
                if re.search(pattern, candidate) and low <= len(candidate) <= (
                    high if high is not None else len(candidate)
                ):
                    return candidate
            generated = _from_pattern(pattern, self._rng)
            if generated is not None and re.search(pattern, generated):
                return generated
        text = word
        while len(text) < low:
            text += "-" + self._rng.choice(_WORDS)
        return text[: int(high)] if high is not None else text

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        low, high = _bounds(schema, integer=True)
        step = schema.get("multipleOf")
        if isinstance(step, int) and step > 0:
            first = -(-low // step) * step
            return first + step * self._rng.randint(0, max(0, (high - first) // step))
        return self._rng.randint(low, high)

    def _number(self, schema: dict[str, Any], depth: int) -> float:
        low, high = _bounds(schema, integer=False)
        return round(self._rng.uniform(low, high), 2) if high - low > 0.02 else (low + high) / 2

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self._rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None


@overload
def _bounds(schema: dict[str, Any], *, integer: Literal[True]) -> tuple[int, int]: ...
@overload
def _bounds(schema: dict[str, Any], *, integer: Literal[False]) -> tuple[float, float]: ...
def _bounds(schema: dict[str, Any], *, integer: bool) -> tuple[int, int] | tuple[float, float]:
    low = schema.get("minimum", schema.get("exclusiveMinimum", 0 if integer else 0.0))
    high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
    if integer:
        low = int(low) + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        high = int(high) - (1 if "exclusiveMaximum" in schema and "maximum" not in schema else 0)
        return low, max(low, high)
    margin = 0.01
    low = float(low) + (margin if "exclusiveMinimum" in schema and "minimum" not in schema else 0.0)
    high = float(high) - (margin if "exclusiveMaximum" in schema and "maximum" not in schema else 0.0)
    return low, max(low, high)


_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_FORMATS = {
    "date-time": "2026-01-02T03:04:05Z",
    "date": "2026-01-02",
    "time": "03:04:05",
    "email": "test@example.com",
    "uri": "https://example.com/test",
    "url": "https://example.com/test",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
}


def _from_pattern(pattern: str, rng: random.Random) -> str | None:
    """A string the regular expression matches, built from its parse tree; None for forms it does not cover."""
    try:
        tree = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, AttributeError):
        return None
    try:
        return _emit(list(tree), rng)
    except _Unsupported:
        return None


class _Unsupported(Exception):
    pass


_CATEGORIES = {
    "CATEGORY_DIGIT": "0123456789",
    "CATEGORY_WORD": "abcxyz_019",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_DIGIT": "abc",
    "CATEGORY_NOT_WORD": "-",
    "CATEGORY_NOT_SPACE": "a",
}


def _emit(items: list[Any], rng: random.Random) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # anchors and lookarounds add no characters
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_one_of(arg, rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            count = low if high == low else min(max(low, 1), high)
            out.append("".join(_emit(list(sub), rng) for _ in range(count)))
        elif name == "SUBPATTERN":
            out.append(_emit(list(arg[-1]), rng))
        elif name == "BRANCH":
            out.append(_emit(list(arg[1][0]), rng))
        else:
            raise _Unsupported(name)
    return "".join(out)


def _one_of(choices: list[Any], rng: random.Random) -> str:
    for op, arg in choices:
        name = str(op)
        if name == "NEGATE":
            raise _Unsupported(name)
        if name == "LITERAL":
            return chr(arg)
        if name == "RANGE":
            return chr(rng.randint(arg[0], arg[1]))
        if name == "CATEGORY":
            return rng.choice(_CATEGORIES.get(str(arg), "a"))
    raise _Unsupported("empty class")

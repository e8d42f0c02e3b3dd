"""A prompt's typed answer (`define_prompt(output=...)`): its schema, how a request asks for it, how an answer is read.

An `OutputSpec` is made once per prompt from any type a pydantic `TypeAdapter` takes (a model, a list,
a union of models, a `Literal`). Providers want an object at the schema's root (OpenAI's
`response_format`, Anthropic's tool input), so any other type is wrapped as `{"response": <value>}` on the
wire and unwrapped when read, as PydanticAI does. The schema goes through `dialect.dialect_schema`, the
one place strictness is decided, so a typed answer and a tool's arguments follow the same rules.

Three ways to ask (`OutputMode`): ``native`` and ``tool`` send `response_format` (LiteLLM turns it into
each provider's form: OpenAI's `json_schema`, Gemini's `responseSchema`/`responseJsonSchema`, Anthropic's
`output_format` where the model has it, else a forced tool); ``prompted`` sends the schema in the system
prompt, for models that take neither. Reading an answer never guesses: text that is not the type is an
`OutputInvalid` naming the fields, which the engine sends back to the model (`engine/typed_output.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from orchestrator.definitions.arg_types import SchemaError
from orchestrator.definitions.define import OUTPUT_MODES, OutputMode
from orchestrator.definitions.dialect import JsonSchema, dialect_schema, drop_null_optionals, strict_notes
from providers import model_json

__all__ = [
    "OUTPUT_MODES",
    "OutputInvalid",
    "OutputMode",
    "OutputRequest",
    "OutputSpec",
    "check_output",
    "default_mode",
]

_WRAP_KEY = "response"

# The mode a provider family gets unless the prompt names one (docs/providers.md, "Typed answers").
_DEFAULT_MODES: dict[str, OutputMode] = {"anthropic": "tool"}


def default_mode(provider_type: str) -> OutputMode:
    """Anthropic: `tool` (LiteLLM's forced tool, or `output_format` where the model has it); else `native`."""
    return _DEFAULT_MODES.get(provider_type, "native")


class OutputInvalid(ValueError):
    """An answer that is not the prompt's output type; `fields` names each problem (`path: message`)."""

    def __init__(self, fields: list[str]) -> None:
        self.fields = fields
        super().__init__("; ".join(fields))


@dataclass(frozen=True)
class OutputRequest:
    """What a request carries for a typed answer: extra parameters, or a note for the system prompt."""

    extra: dict[str, Any] = field(default_factory=dict)
    system_note: str | None = None


@dataclass(frozen=True, eq=False)
class OutputSpec:
    """One prompt's output type, ready to ask for and to read answers of."""

    adapter: TypeAdapter[Any]
    name: str  # the schema's name in `response_format` (the model's class name, or "output")
    schema: JsonSchema  # the wire schema before any dialect: always an object at the root
    wrapped: bool  # the type is not an object: its value travels as {"response": value}

    @classmethod
    def of(cls, output: object) -> OutputSpec:
        """The spec of `output`; a type pydantic cannot describe is a `SchemaError` naming `output`."""
        try:
            adapter: TypeAdapter[Any] = TypeAdapter(cast("Any", output))  # any type a TypeAdapter takes
            schema = adapter.json_schema()
        except Exception as exc:  # pydantic raises several kinds (schema generation, unknown type)
            problem = f"define_prompt: 'output' must be a type pydantic can validate, got {output!r}: {exc}"
            raise SchemaError(problem) from None
        name = output.__name__ if isinstance(output, type) and issubclass(output, BaseModel) else "output"
        wrapped = schema.get("type") != "object"
        if wrapped:
            defs = schema.pop("$defs", None)
            schema = {"type": "object", "properties": {_WRAP_KEY: schema}, "required": [_WRAP_KEY]}
            if defs:
                schema["$defs"] = defs
        return cls(adapter=adapter, name=name, schema=schema, wrapped=wrapped)

    def wire_schema(self, dialect: str) -> JsonSchema:
        """The schema in `dialect`'s form (refs inlined; OpenAI strict where it can be)."""
        return dialect_schema(self.schema, dialect, path="output")

    def request(self, dialect: str, mode: OutputMode) -> OutputRequest:
        """What a request of `mode` sends: `response_format` (native, tool) or a system-prompt note."""
        schema = self.wire_schema(dialect)
        if mode == "prompted":
            return OutputRequest(system_note=self.instructions(dialect))
        json_schema: dict[str, Any] = {"name": self.name, "schema": schema}
        if dialect == "openai":
            json_schema["strict"] = not strict_notes(schema)
        return OutputRequest(extra={"response_format": {"type": "json_schema", "json_schema": json_schema}})

    def instructions(self, dialect: str) -> str:
        """The words that ask for the type when the request cannot (prompted mode, corrections)."""
        schema = json.dumps(self.wire_schema(dialect), separators=(",", ":"))
        return f"Answer with one JSON value and nothing else, matching this JSON schema: {schema}"

    def parse(self, text: str, dialect: str) -> tuple[Any, Any]:
        """(the validated value, its JSON form) of an answer's text; `OutputInvalid` naming what failed."""
        try:
            data = model_json.loads(_unfenced(text))
        except ValueError as exc:
            raise OutputInvalid([f"(answer): not JSON ({exc})"]) from None
        if dialect == "openai":  # strict mode sends null for an optional field it leaves out
            data = drop_null_optionals(self.schema, data)
        if self.wrapped:
            if not isinstance(data, dict) or _WRAP_KEY not in data:
                raise OutputInvalid([f"{_WRAP_KEY}: Field required"])
            data = data[_WRAP_KEY]
        try:
            value = self.adapter.validate_python(data)
        except ValidationError as exc:
            raise OutputInvalid(_fields(exc)) from None
        return value, self.adapter.dump_python(value, mode="json")

    def value_of(self, stored: Any) -> Any:
        """The value again from its stored JSON form (a message's `metadata["output"]`)."""
        return self.adapter.validate_python(stored)


def check_output(output: object) -> None:
    """Refuse, when the prompt is defined, an output type pydantic cannot describe. Whether the model's dialect
    can take it depends on the config (`model_checks.py`, `orchestrator check`)."""
    OutputSpec.of(output)


def _fields(exc: ValidationError) -> list[str]:
    return [f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()]


def _unfenced(text: str) -> str:
    """Text without a Markdown code fence around it (prompted models often add one)."""
    body = text.strip()
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        body = body[3:-3]
        first_line, _, rest = body.partition("\n")
        body = rest if first_line.strip().isalpha() or not first_line.strip() else body
    return body.strip()

"""Free-form JSON arguments (`Any`, `JsonValue`, `dict[str, Any]`, `list[Any]`): issue 21.

What each provider documents, and what LiteLLM does on the way:
- OpenAI strict mode needs every object closed and every value typed, so a
  tool with a free-form value is sent with `strict: false` (the others stay
  strict), the value as `{}` (any JSON) or an open object.
- Anthropic takes standard JSON schema as `input_schema`; LiteLLM only fixes
  the top level, so `{}` and `additionalProperties: true` reach Claude as sent.
- Gemini's `parameters` is an OpenAPI 3.0 subset: no `additionalProperties`,
  no `properties: {}`, an array needs typed `items`, and LiteLLM's
  `build_vertex_schema` turns a typeless schema (or empty `items`) into an
  object. So an open object is `type: object` alone, and any JSON value is an
  `anyOf` of the typed forms, which LiteLLM keeps as is (checked below).
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import jsonschema
import pytest
import respx
from click.testing import CliRunner
from litellm.llms.vertex_ai.common_utils import build_vertex_schema
from pydantic import BaseModel, Field, JsonValue, create_model
from support import Q, definitions
from test_schema import _gemini_as_json_schema, assert_gemini

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.cli.main import main
from orchestrator.definitions.define import DefinitionError
from orchestrator.definitions.loader import load_definitions
from orchestrator.definitions.schema import (
    SchemaError,
    check_args_model,
    drop_null_defaults,
    strict_notes,
    tool_parameters,
    tool_spec,
)
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import SCRIPTED_BASE_URL, config_from_dict
from providers.sse import openai_events

FIXTURES = Path(__file__).resolve().parent / "fixtures"

# what a model may send for a free-form value: every JSON kind, nested
ANY_VALUES: list[Any] = [
    "",
    "text",
    0,
    1,
    1.0,
    -2.5,
    10**30,
    True,
    False,
    None,
    [],
    {},
    [1, "a", None, [2.0]],
    {"k": {"n": [1, {}]}},
]
OBJECTS: list[Any] = [{}, {"a": 1}, {"nested": {"list": [1, 2.0, "", None], "flag": False}}, {"": "empty key"}]
ARRAYS: list[Any] = [[], [1, "a", None], [[1, 2], {"k": "v"}, 3.5]]

FORMS: list[tuple[str, Any, list[Any]]] = [
    ("Any", Any, ANY_VALUES),
    ("JsonValue", JsonValue, ANY_VALUES),
    ("dict[str, Any]", dict[str, Any], OBJECTS),
    ("dict", dict, OBJECTS),
    ("dict[str, JsonValue]", dict[str, JsonValue], OBJECTS),
    ("list[Any]", list[Any], ARRAYS),
    ("list", list, ARRAYS),
    ("list[JsonValue]", list[JsonValue], ARRAYS),
]
FORM_IDS = [name for name, _, _ in FORMS]


def _args(annotation: Any, *, optional: bool = False) -> type[BaseModel]:
    field = (annotation | None, None) if optional else (annotation, Field(description="The value"))
    return create_model("Args", name=(str, ...), value=field)


def _nested(annotation: Any) -> type[BaseModel]:
    """The free-form value two typed objects down: `outer.inner.value`."""
    inner = create_model("Inner", value=(annotation, ...), label=(str, "x"))
    outer = create_model("Outer", inner=(inner, ...))
    return create_model("Args", outer=(outer, ...), items=(list[inner], []))


# --------------------------------------------------------------------------
# accepted, validated, unchanged
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "annotation", "samples"), FORMS, ids=FORM_IDS)
def test_each_form_is_accepted_and_reaches_execute_unchanged(name: str, annotation: Any, samples: list[Any]) -> None:
    for model in (_args(annotation), _args(annotation, optional=True), _nested(annotation)):
        check_args_model(model)
    model = _args(annotation)
    for value in samples:
        sent = {"name": "n", "value": value}
        got = model.model_validate(drop_null_defaults(model, sent)).value
        assert json.dumps(got) == json.dumps(value)  # key order, 1 vs 1.0, empty strings, nesting
        nested = _nested(annotation)
        instance: Any = nested.model_validate({"outer": {"inner": {"value": value}}})
        got = instance.outer.inner.value
        assert json.dumps(got) == json.dumps(value)


def test_object_forms_refuse_a_non_object_with_a_correctable_error() -> None:
    model = _args(dict[str, Any])
    with pytest.raises(Exception, match="valid dictionary"):
        model.model_validate({"name": "n", "value": [1, 2]})


def test_nulls_inside_a_free_form_value_are_kept() -> None:
    model = _args(dict[str, Any])
    sent = {"name": "n", "value": {"a": None, "b": [None], "c": {"d": None}}}
    assert drop_null_defaults(model, sent) == sent


def test_an_optional_free_form_value_sent_as_null_takes_its_default() -> None:
    model = create_model("Args", value=(dict[str, Any], {"preset": 1}))
    instance: Any = model.model_validate(drop_null_defaults(model, {"value": None}))
    assert instance.value == {"preset": 1}


def test_depth_still_counts_free_form_containers() -> None:
    model: Any = dict[str, Any]
    for _ in range(5):
        model = list[model]
    check_args_model(create_model("Args", deep=(model, ...)))  # level 1 + 5 lists + the object = 7
    with pytest.raises(SchemaError, match="nesting of 8 levels"):
        check_args_model(create_model("Args", deep=(list[model], ...)))


def test_unsupported_types_beside_free_form_ones_keep_their_dotted_path() -> None:
    inner = create_model("Inner", ok=(dict[str, Any], ...), when=(Annotated[bytes, Field()], ...))
    with pytest.raises(SchemaError, match=r"Args\.items\[\]\.when: bytes is not supported"):
        check_args_model(create_model("Args", items=(list[inner], ...)))
    with pytest.raises(SchemaError, match=r"Args\.tags: a record's keys must be str, got int"):
        check_args_model(create_model("Args", tags=(dict[int, Any], ...)))


def test_a_progress_argument_must_still_be_a_top_level_string() -> None:
    async def execute(state: Any, args: Any) -> ToolResult:
        return ToolResult.ok("")

    model = create_model("Args", text=(Any, ...), note=(str, ""))
    with pytest.raises(DefinitionError, match="progress_argument 'text' must be a string argument"):
        define_tool(description="d", args=model, execute=execute, progress_argument="text")
    define_tool(description="d", args=model, execute=execute, progress_argument="note")


# --------------------------------------------------------------------------
# schemas per dialect
# --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "annotation", "samples"), FORMS, ids=FORM_IDS)
def test_openai_sends_the_tool_non_strict_with_a_schema_that_takes_every_value(
    name: str, annotation: Any, samples: list[Any]
) -> None:
    for model, wrap in (
        (_args(annotation), lambda v: {"name": "n", "value": v}),
        (_nested(annotation), _nested_instance),
    ):
        spec = tool_spec("set_it", "Set it", model, "openai")["function"]
        assert spec["strict"] is False
        params = spec["parameters"]
        assert params["additionalProperties"] is False and set(params["required"]) == set(params["properties"])
        for value in samples:
            jsonschema.validate(wrap(value), params)
        notes = strict_notes(params)
        assert notes and all(
            n.split(":")[0]
            in ("value", "value[]", "outer.inner.value", "outer.inner.value[]", "items[].value", "items[].value[]")
            for n in notes
        ), notes
    assert tool_spec("lookup", "Look up", Q, "openai")["function"]["strict"] is True  # the other tools stay strict


def _nested_instance(value: Any) -> dict[str, Any]:
    return {"outer": {"inner": {"value": value, "label": None}}, "items": [{"value": value, "label": "y"}]}


@pytest.mark.parametrize(("name", "annotation", "samples"), FORMS, ids=FORM_IDS)
def test_anthropic_takes_the_standard_schema(name: str, annotation: Any, samples: list[Any]) -> None:
    params = tool_parameters(_args(annotation), "anthropic")
    assert params["type"] == "object"
    for value in samples:
        jsonschema.validate({"name": "n", "value": value}, params)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"value": samples[0]}, params)  # still typed around the free-form value


@pytest.mark.parametrize(("name", "annotation", "samples"), FORMS, ids=FORM_IDS)
def test_gemini_gets_the_subset_form_and_litellm_keeps_it(name: str, annotation: Any, samples: list[Any]) -> None:
    for model in (_args(annotation), _args(annotation, optional=True), _nested(annotation)):
        params = tool_parameters(model, "gemini")
        assert_gemini(params)
        text = json.dumps(params)
        assert "additionalProperties" not in text and '"properties": {}' not in text and "{}" not in text
        _assert_arrays_have_typed_items(params)
        assert build_vertex_schema(copy.deepcopy(params)) == params  # LiteLLM sends it to Gemini unchanged
    params = tool_parameters(_args(annotation), "gemini")
    validator = _gemini_as_json_schema(params)
    limit = 2 if name.startswith("list") else 1  # Gemini's any-value form: no array directly in an array
    gemini_can_say = [v for v in samples if _array_depth(v) <= limit]
    assert gemini_can_say
    for value in gemini_can_say:
        jsonschema.validate({"name": "n", "value": value}, validator)


def _assert_arrays_have_typed_items(node: Any) -> None:
    if isinstance(node, dict):
        if node.get("type") == "array":
            items = node.get("items")
            assert isinstance(items, dict) and ("type" in items or "anyOf" in items), node
        for value in node.values():
            _assert_arrays_have_typed_items(value)
    elif isinstance(node, list):
        for value in node:
            _assert_arrays_have_typed_items(value)


def _array_depth(value: Any) -> int:
    """How many arrays sit directly inside each other (an object in between resets the count)."""
    if isinstance(value, list):
        return 1 + max((_array_depth(v) for v in value), default=0)
    return 0


def test_gemini_open_object_keeps_its_description_and_nullability() -> None:
    model = create_model("Args", settings=(dict[str, Any] | None, Field(default=None, description="APN settings")))
    assert tool_parameters(model, "gemini")["properties"]["settings"] == {
        "type": "object",
        "description": "APN settings",
        "nullable": True,
    }


def test_gemini_still_refuses_a_typed_record() -> None:
    with pytest.raises(SchemaError, match=r"Args\.labels: Gemini cannot take a record"):
        tool_parameters(create_model("Args", labels=(dict[str, int], ...)), "gemini")


def test_strict_notes_name_each_free_form_path() -> None:
    model = create_model("Args", settings=(dict[str, Any], ...), payload=(JsonValue, None), tags=(dict[str, int], {}))
    assert strict_notes(tool_parameters(model, "openai")) == [
        "settings: a free-form object (dict[str, Any]) has keys strict mode cannot name",
        "payload: any JSON value (Any / JsonValue) has no type strict mode can check",
        "tags: a record (dict[str, T]) has keys strict mode cannot name",
    ]
    assert strict_notes(tool_parameters(Q, "openai")) == []


# --------------------------------------------------------------------------
# loader and CLI
# --------------------------------------------------------------------------

_SETTINGS_TOOL = """\
from typing import Any
from pydantic import BaseModel, Field
from orchestrator import ToolResult, define_tool


class Args(BaseModel):
    customer_id: str
    settings: dict[str, Any] = Field(description="APN settings, any keys")


async def execute(state, args):
    return ToolResult.ok("saved")


tool = define_tool(description="Save settings", args=Args, execute=execute)
"""

_PLAIN_TOOL = """\
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool


class Args(BaseModel):
    q: str


async def execute(state, args):
    return ToolResult.ok(args.q)


tool = define_tool(description="Look up", args=Args, execute=execute)
"""

_BAD_TOOL = """\
from pydantic import BaseModel
from orchestrator import ToolResult, define_tool


class Filters(BaseModel):
    raw: bytes


class Args(BaseModel):
    filters: Filters


async def execute(state, args):
    return ToolResult.ok("")


tool = define_tool(description="Broken", args=Args, execute=execute)
"""

_PROMPT = """\
from orchestrator import define_prompt

prompt = define_prompt(prompt="Help.", tool_description="Helps", tools=("update_settings", "lookup", "broken"))
"""


def _folder(tmp_path: Path, *, bad: bool) -> Path:
    root = tmp_path / "defs"
    (root / "tools").mkdir(parents=True)
    (root / "prompts").mkdir()
    (root / "tools" / "update_settings.py").write_text(_SETTINGS_TOOL)
    (root / "tools" / "lookup.py").write_text(_PLAIN_TOOL)
    (root / "prompts" / "helper.py").write_text(_PROMPT if bad else _PROMPT.replace(', "broken"', ""))
    if bad:
        (root / "tools" / "broken.py").write_text(_BAD_TOOL)
    return root


def test_a_folder_with_a_dict_any_tool_loads(tmp_path: Path) -> None:
    defs = load_definitions(_folder(tmp_path, bad=False))
    assert set(defs.tools) == {"update_settings", "lookup"}
    assert defs.callable_spec("update_settings")["function"]["strict"] is False
    assert defs.callable_spec("lookup")["function"]["strict"] is True


def test_one_unsupported_tool_is_one_problem_and_the_rest_loads(tmp_path: Path) -> None:
    root = _folder(tmp_path, bad=True)
    defs = load_definitions(root, collect=True)
    assert [(p.rule, Path(p.file).name) for p in defs.problems] == [("unsupported-argument-type", "broken.py")]
    assert "Args.filters.raw: bytes is not supported" in defs.problems[0].message
    assert defs.problems[0].line == 17  # the define_tool line
    assert set(defs.tools) == {"update_settings", "lookup"} and set(defs.prompts) == {"helper"}  # no knock-on problems


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_tools_json_openai_shows_only_the_free_form_tool_non_strict_with_why(tmp_path: Path) -> None:
    root = _folder(tmp_path, bad=False)
    code, out = _invoke("tools", "--json", "--path", str(root), "--dialect", "openai")
    assert code == 0, out
    by_name = {e["name"]: e for e in json.loads(out)}
    assert by_name["update_settings"]["strict"] is False
    assert by_name["update_settings"]["strict_notes"] == [
        "settings: a free-form object (dict[str, Any]) has keys strict mode cannot name"
    ]
    assert by_name["update_settings"]["parameters"]["properties"]["settings"] == {
        "type": "object",
        "description": "APN settings, any keys",
        "additionalProperties": True,
    }
    others = [e for name, e in by_name.items() if name != "update_settings"]
    assert others and all(e["strict"] is True and "strict_notes" not in e for e in others)


def test_tools_text_listing_notes_the_lost_strict_mode(tmp_path: Path) -> None:
    code, out = _invoke("tools", "--path", str(_folder(tmp_path, bad=False)))
    assert code == 0
    assert "    note: not strict: settings: a free-form object" in out
    assert "    settings (object, required): APN settings, any keys" in out


def test_check_notes_the_lost_strict_mode_without_failing(tmp_path: Path) -> None:
    code, out = _invoke("check", str(_folder(tmp_path, bad=False)))
    assert code == 0, out
    assert "note: update_settings: sent to openai with strict: false (settings: a free-form object" in out
    assert "warning" not in out and "lookup" not in out
    assert "no problems" in out


def test_check_reports_the_unsupported_tool_with_its_path(tmp_path: Path) -> None:
    code, out = _invoke("check", str(_folder(tmp_path, bad=True)))
    assert code == 1
    assert "broken.py:17: Args.filters.raw: bytes is not supported" in out
    assert "1 problem found" in out


# --------------------------------------------------------------------------
# end to end: recorded OpenAI bytes -> LiteLLM or the wire reader -> executor -> execute
# --------------------------------------------------------------------------

RECORDED = FIXTURES / "openai_freeform_call.sse"  # a gpt-4o-mini stream calling update_settings


def _sent_fragments() -> list[str]:
    """The argument deltas the recording carries, in order, as sent."""
    fragments: list[str] = []
    for line in RECORDED.read_text(encoding="utf-8").splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                fragments += [call["function"]["arguments"] for call in choice["delta"].get("tool_calls") or []]
    return fragments


def _sent_arguments() -> str:
    return "".join(_sent_fragments())


def test_the_recording_has_the_hard_cases() -> None:
    text = _sent_arguments()
    raw = RECORDED.read_text(encoding="utf-8")
    assert '"arguments":".caf"' in raw and '"arguments":"\\\\u00"' in raw  # a \u escape split across deltas
    assert '"ratio":1.0' in text and '"count":1,' in text and "1e3" in text and "2.50" in text and "-0.0" in text
    assert "123456789012345678901234567890" in text and '"":"empty key"' in text and "😀 漫游" in text


@pytest.fixture
async def recorded_runtime(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    bodies: list[dict[str, Any]] = []
    answers = [RECORDED.read_bytes(), b"".join(openai_events("Saved.", [], model="gpt-4o-mini", usage=(1, 1)))]

    def answer(req: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(req.content))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=answers[len(bodies) - 1])

    runtimes: list[Runtime] = []

    async def make(defs: Any, stream: str) -> Runtime:
        config = {
            "providers": {"rec": {"type": "scripted", "stream": stream}},
            "models": {"demo": {"provider": "rec", "model": "gpt-4o-mini", "retry": {"attempts": 1}}},
            "default_model": "demo",
        }
        runtime = Runtime(defs, config=config_from_dict(config), storage=SQLiteStorage(str(tmp_path / f"{stream}.db")))
        await runtime.open()
        runtimes.append(runtime)
        return runtime

    with respx.mock(assert_all_called=True) as router:
        router.post(f"{SCRIPTED_BASE_URL}/chat/completions").mock(side_effect=answer)
        yield make, bodies
    for runtime in runtimes:
        await runtime.close()


@pytest.mark.parametrize("stream", ["auto", "litellm"])
@pytest.mark.parametrize(
    "annotation",
    [dict[str, Any], dict[str, JsonValue], JsonValue, Any],
    ids=["dict-Any", "dict-JsonValue", "JsonValue", "Any"],
)
async def test_a_streamed_nested_free_form_object_reaches_execute_as_sent(
    recorded_runtime: Any, stream: str, annotation: Any
) -> None:
    make, bodies = recorded_runtime
    seen: list[Any] = []
    args_model = create_model("Args", customer_id=(str, ...), settings=(annotation, Field(description="APN settings")))

    async def update_settings(state: Any, args: Any) -> ToolResult:
        seen.append(args.settings)
        return ToolResult.ok("saved")

    async def lookup(state: Any, args: Q) -> ToolResult:
        return ToolResult.ok(args.q)

    defs = definitions(
        tools={
            "update_settings": define_tool(description="Save settings", args=args_model, execute=update_settings),
            "lookup": define_tool(description="Look up", args=Q, execute=lookup),
        },
        prompts={"pa": define_prompt(prompt="Help.", tool_description="a", tools=("update_settings", "lookup"))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )
    runtime = await make(defs, stream)
    thread = await runtime.create_thread("chat")
    result = await thread.send("Set my APN to internet.café")
    assert result.output == "Saved."

    sent = json.loads(_sent_arguments())["settings"]
    assert len(seen) == 1
    assert json.dumps(seen[0], ensure_ascii=False) == json.dumps(sent, ensure_ascii=False)  # order, 1 vs 1.0, -0.0
    assert seen[0]["big"] == 123456789012345678901234567890 and type(seen[0]["mms"]["ratio"]) is float
    assert seen[0]["apn"] == "internet.café" and seen[0]["quote"] == 'say "hi"\ntab\t' and seen[0][""] == "empty key"

    strict = {t["function"]["name"]: t["function"].get("strict") for t in bodies[0]["tools"]}
    assert strict == {"update_settings": False, "lookup": True}
    stored = [m for m in (await thread.get_messages()).messages if m.role == "tool"]
    assert [m.tool_status for m in stored] == ["success"]


@pytest.mark.parametrize(
    ("wire", "provider", "model_name"),
    [
        ("anthropic", {"type": "anthropic", "api_key": "${FREEFORM_KEY}"}, "claude-sonnet-4-5"),
        ("gemini", {"type": "gemini", "api_key": "${FREEFORM_KEY}"}, "gemini-2.5-flash"),
    ],
)
async def test_other_wires_carry_the_dialect_schema_and_the_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wire: str, provider: dict[str, Any], model_name: str
) -> None:
    """The schema LiteLLM puts on each provider's wire is our dialect's; the object comes back whole."""
    from providers.scripted import ScriptedCall, ScriptedModel, ScriptedResponse

    monkeypatch.setenv("FREEFORM_KEY", "k-freeform-test-0123456789")
    sent = json.loads(_sent_arguments())["settings"]
    seen: list[Any] = []
    args_model = create_model(
        "Args", customer_id=(str, ...), settings=(dict[str, Any], Field(description="APN settings")), extra=(Any, None)
    )

    async def update_settings(state: Any, args: Any) -> ToolResult:
        seen.append(args.settings)
        return ToolResult.ok("saved")

    defs = definitions(
        tools={"update_settings": define_tool(description="Save settings", args=args_model, execute=update_settings)},
        prompts={"pa": define_prompt(prompt="Help.", tool_description="a", tools=("update_settings",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedCall("update_settings", _sent_arguments())]),
            ScriptedResponse(text="Saved."),
        ],
        wire=wire,
    )  # type: ignore[arg-type]
    config = {
        "providers": {"p": provider},
        "models": {"m": {"provider": "p", "model": model_name, "params": {"max_tokens": 64}, "retry": {"attempts": 1}}},
        "default_model": "m",
    }
    with model.serving():
        runtime = Runtime(defs, config=config_from_dict(config), storage=SQLiteStorage(str(tmp_path / "w.db")))
        async with runtime:
            result = await (await runtime.create_thread("chat")).send("Set my APN")
    assert result.output == "Saved."
    assert seen == [sent] and json.dumps(seen[0]) == json.dumps(sent)
    expected = tool_parameters(args_model, wire)
    if wire == "anthropic":
        assert model.requests[0]["tools"][0]["input_schema"] == expected
    else:
        declared = model.requests[0]["tools"][0]["function_declarations"][0]["parameters"]
        assert declared == expected  # LiteLLM put our gemini schema on the wire unchanged


def test_progress_scanning_ignores_keys_inside_a_free_form_value() -> None:
    """Only a top-level string is a progress argument, even when a free-form object holds the same key."""
    from orchestrator.engine.streaming import ProgressScanner

    fragments = _sent_fragments()
    for key, expected in (("customer_id", "C001"), ("apn", None), ("quote", None), ("", None)):
        scanner = ProgressScanner(key)
        found = [v for v in (scanner.feed(f) for f in fragments) if v is not None]
        assert found == ([expected] if expected else []), key

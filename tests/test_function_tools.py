"""Tools from plain functions: `define_tool(fn)` / `@define_tool` (issue 17).

The signature and docstring must give exactly what an equivalent `Args`
model gives, in every dialect, and the same types must be refused.
"""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError
from support import definitions

from orchestrator import Side, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.definitions.define import DefinitionError
from orchestrator.definitions.loader import load_definitions
from orchestrator.definitions.schema import DIALECTS, SchemaError, tool_parameters, tool_spec
from providers.scripted import ScriptedCall, ScriptedResponse

if TYPE_CHECKING:
    from orchestrator import ThreadState  # only for type checking: define_tool still finds it


# --------------------------------------------------------------------------
# docstring styles
# --------------------------------------------------------------------------


async def google(city: str, units: Literal["metric", "imperial"] = "metric", days: int = 1) -> ToolResult:
    """Get the weather forecast for a city.

    Reads the demo data; no key needed.

    Args:
        city: City name, e.g. Oslo.
        units (str): Unit system, metric or
            imperial.
        days: How many days ahead.

    Returns:
        The forecast as text.
    """
    return ToolResult.ok(city)


async def numpy(city: str, units: Literal["metric", "imperial"] = "metric", days: int = 1) -> ToolResult:
    """Get the weather forecast for a city.

    Reads the demo data; no key needed.

    Parameters
    ----------
    city : str
        City name, e.g. Oslo.
    units : {"metric", "imperial"}, optional
        Unit system, metric or
        imperial.
    days : int
        How many days ahead.

    Returns
    -------
    ToolResult
        The forecast as text.
    """
    return ToolResult.ok(city)


async def sphinx(city: str, units: Literal["metric", "imperial"] = "metric", days: int = 1) -> ToolResult:
    """Get the weather forecast for a city.

    Reads the demo data; no key needed.

    :param city: City name, e.g. Oslo.
    :param str units: Unit system, metric or
        imperial.
    :param days: How many days ahead.
    :returns: The forecast as text.
    """
    return ToolResult.ok(city)


class WeatherArgs(BaseModel):  # what the three functions above must be equivalent to (no docstring: none above)
    city: str = Field(description="City name, e.g. Oslo.")
    units: Literal["metric", "imperial"] = Field("metric", description="Unit system, metric or\nimperial.")
    days: int = Field(1, description="How many days ahead.")


@pytest.mark.parametrize("fn", [google, numpy, sphinx], ids=["google", "numpy", "sphinx"])
def test_each_docstring_style_gives_description_and_parameter_docs(fn: Any) -> None:
    tool = define_tool(fn)
    assert tool.description == "Get the weather forecast for a city.\n\nReads the demo data; no key needed."
    assert tool.args is not None and list(tool.args.model_fields) == ["city", "units", "days"]
    for dialect in DIALECTS:  # the same schema an Args model gives, in every dialect
        assert tool_parameters(tool.args, dialect) == tool_parameters(WeatherArgs, dialect)
    strict = tool_spec(fn.__name__, tool.description, tool.args, "openai")["function"]["strict"]
    assert strict is True


def test_description_argument_overrides_the_docstring() -> None:
    assert define_tool(google, description="Weather.").description == "Weather."


# --------------------------------------------------------------------------
# defaults, Annotated Field, state, calling
# --------------------------------------------------------------------------


class Window(BaseModel):
    start: str
    end: str


async def book(
    state: ThreadState,
    room: Annotated[str, Field(description="Room code", pattern=r"^[A-Z]\d{2}$")],
    window: Window,
    people: Annotated[int, Field(ge=1, le=12)] = 2,
    notes: str | None = None,
    *,
    tags: list[str] | None = None,
    extra: dict[str, Any] | None = None,
) -> ToolResult:
    """Book a meeting room.

    Args:
        state: The thread (not an argument).
        room: Overridden by the Field's own description.
        window: When, as ISO times.
        people: Head count.
    """
    return ToolResult.ok(
        json.dumps([state.thread_id if state else None, room, window.start, people, notes, tags, extra])
    )


def test_defaults_and_annotated_fields() -> None:
    tool = define_tool(book)
    assert tool.args is not None
    fields = tool.args.model_fields
    assert list(fields) == ["room", "window", "people", "notes", "tags", "extra"]  # the state is not an argument
    assert [n for n, f in fields.items() if f.is_required()] == ["room", "window"]
    assert fields["room"].description == "Room code"  # the Field's description wins over the docstring's
    assert fields["people"].description == "Head count."
    schema = tool_parameters(tool.args, "anthropic")
    assert schema["properties"]["people"] == {
        "type": "integer",
        "description": "Head count.",
        "minimum": 1,
        "maximum": 12,
        "default": 2,
    }
    assert schema["properties"]["room"]["pattern"] == r"^[A-Z]\d{2}$"
    with pytest.raises(ValidationError):
        tool.args.model_validate({"room": "A01", "window": {"start": "9", "end": "10"}, "people": 13})
    with pytest.raises(ValidationError):
        tool.args.model_validate({"room": "lobby", "window": {"start": "9", "end": "10"}})
    assert tool_spec("book", tool.description, tool.args, "openai")["function"]["strict"] is False  # extra is free-form


async def test_execute_passes_typed_values_positionally_and_by_keyword() -> None:
    tool = define_tool(book)
    assert tool.args is not None
    args = tool.args.model_validate(
        {"room": "A01", "window": {"start": "9", "end": "10"}, "tags": ["x"], "extra": {"k": [1, 2.0]}}
    )
    result = await tool.execute(None, args)
    assert json.loads(result.result) == [None, "A01", "9", 2, None, ["x"], {"k": [1, 2.0]}]


async def test_a_function_without_arguments_and_one_with_only_the_state() -> None:
    async def now() -> ToolResult:
        """The time."""
        return ToolResult.ok("noon")

    async def whoami(state: ThreadState) -> ToolResult:
        """Who is asking."""
        return ToolResult.ok(str(state))

    for fn, expected in ((now, "noon"), (whoami, "S")):
        tool = define_tool(fn)
        assert tool.args is None
        assert (await tool.execute("S")).result == expected


def test_progress_argument_names_a_string_parameter() -> None:
    async def draft(text: str, n: int = 1) -> ToolResult:
        """Draft."""
        return ToolResult.ok(text)

    assert define_tool(draft, progress_argument="text").progress_argument == "text"
    with pytest.raises(DefinitionError, match="must be a string argument"):
        define_tool(draft, progress_argument="n")


# --------------------------------------------------------------------------
# refusals
# --------------------------------------------------------------------------


class Filters(BaseModel):
    since: dt.datetime


async def unsupported_date(when: dt.date) -> ToolResult:
    """Bad."""
    return ToolResult.ok("")


async def unsupported_nested(query: str, filters: Filters) -> ToolResult:
    """Bad."""
    return ToolResult.ok("")


async def unsupported_bytes(state: ThreadState, blob: list[bytes]) -> ToolResult:
    """Bad."""
    return ToolResult.ok("")


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (
            unsupported_date,
            r"define_tool\(unsupported_date\): parameter 'when': unsupported_date\.when: date is not supported",
        ),
        (unsupported_nested, r"parameter 'filters': unsupported_nested\.filters\.since: datetime is not supported"),
        (unsupported_bytes, r"parameter 'blob': unsupported_bytes\.blob\[\]: bytes is not supported"),
    ],
)
def test_unsupported_types_are_refused_naming_the_parameter(fn: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        define_tool(fn)


def _sync(city: str) -> ToolResult:
    """Sync."""
    return ToolResult.ok(city)


async def _untyped(city) -> ToolResult:  # type: ignore[no-untyped-def]
    """Untyped."""
    return ToolResult.ok(city)


async def _star(*cities: str) -> ToolResult:
    """Star."""
    return ToolResult.ok("")


async def _state_later(city: str, state: ThreadState) -> ToolResult:
    """Late state."""
    return ToolResult.ok(city)


async def _stale(city: str) -> ToolResult:
    """Stale docs.

    Args:
        cty: A typo'd name.
    """
    return ToolResult.ok(city)


async def _undocumented(city: str) -> ToolResult:
    return ToolResult.ok(city)


async def _unresolvable(city: NotImportedAnywhere) -> ToolResult:  # type: ignore[name-defined]  # noqa: F821
    """Unresolvable."""
    return ToolResult.ok("")


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_sync, r"define_tool\(_sync\): the function must be async"),
        (_untyped, r"parameter 'city' needs a type annotation"),
        (_star, r"\*cities cannot be a tool argument"),
        (_state_later, r"parameter 'state': the ThreadState must be the first parameter"),
        (_stale, r"the docstring describes parameter 'cty', which the function does not take \(it takes: city\)"),
        (_undocumented, r"define_tool\(_undocumented\): give the function a docstring or pass description="),
        (_unresolvable, r"cannot resolve a type hint \(name 'NotImportedAnywhere' is not defined\)"),
    ],
)
def test_malformed_functions_are_refused_clearly(fn: Any, message: str) -> None:
    with pytest.raises(DefinitionError, match=message):
        define_tool(fn)


def test_function_and_execute_together_or_neither_are_refused() -> None:
    with pytest.raises(DefinitionError, match="not both"):
        define_tool(google, execute=google)
    with pytest.raises(DefinitionError, match="'execute' is required"):
        define_tool(description="No body")


# --------------------------------------------------------------------------
# in a definitions folder, and end to end
# --------------------------------------------------------------------------


def test_the_loader_takes_the_decorated_function_and_the_assigned_form(tmp_path: Path) -> None:
    tools = tmp_path / "defs" / "tools"
    tools.mkdir(parents=True)
    (tools / "get_weather.py").write_text(
        textwrap.dedent('''\
        from __future__ import annotations

        from typing import TYPE_CHECKING

        from orchestrator import ToolResult, define_tool

        if TYPE_CHECKING:
            from orchestrator import ThreadState


        @define_tool
        async def get_weather(state: ThreadState, city: str) -> ToolResult:
            """Weather for a city.

            Args:
                city: City name.
            """
            return ToolResult.ok(city)
        ''')
    )
    (tools / "echo.py").write_text(
        textwrap.dedent('''\
        from orchestrator import ToolResult, define_tool


        async def echo(text: str) -> ToolResult:
            """Say it back."""
            return ToolResult.ok(text)


        tool = define_tool(echo)
        ''')
    )
    (tools / "two.py").write_text(
        textwrap.dedent('''\
        from orchestrator import ToolResult, define_tool


        @define_tool
        async def one(text: str) -> ToolResult:
            """One."""
            return ToolResult.ok(text)


        @define_tool
        async def other(text: str) -> ToolResult:
            """Other."""
            return ToolResult.ok(text)
        ''')
    )
    defs = load_definitions(tmp_path / "defs", collect=True)
    assert set(defs.tools) == {"get_weather", "echo"}
    assert defs.callable_spec("get_weather")["function"]["parameters"]["properties"] == {
        "city": {"type": "string", "description": "City name."}
    }
    assert [(Path(p.file).name, p.rule) for p in defs.problems] == [("two.py", "missing-definition")]


async def test_a_function_tool_runs_in_a_conversation(make_runtime: Any) -> None:
    seen: list[Any] = []

    async def reserve(state: ThreadState, room: str, window: Window, people: int = 2) -> ToolResult:
        """Reserve a room.

        Args:
            room: Room code.
            window: When.
            people: Head count.
        """
        seen.append((state.thread_id, room, window, people))
        await state.set_value("reserved", room)
        return ToolResult.ok(f"reserved {room}")

    defs = definitions(
        tools={"reserve": define_tool(reserve)},
        prompts={"pa": define_prompt(prompt="Help.", tool_description="a", tools=("reserve",))},
        agents={"chat": define_agent(type="ai_human", side_a=Side("pa"))},
    )
    script = [
        ScriptedResponse(
            tool_calls=[ScriptedCall("reserve", {"room": "B12", "window": {"start": "9", "end": "10"}, "people": None})]
        ),
        ScriptedResponse(text="Done."),
    ]
    rt, model = await make_runtime(defs, script)
    thread = await rt.create_thread("chat")
    result = await thread.send("Book B12 at nine")
    assert result.output == "Done."
    assert seen == [(thread.id, "B12", Window(start="9", end="10"), 2)]  # null -> the default; a model, not a dict
    offered = model.requests[0]["tools"][0]["function"]
    assert offered["description"] == "Reserve a room." and offered["strict"] is True
    assert offered["parameters"]["properties"]["people"]["description"] == "Head count. Defaults to 2 when null."


def test_the_guide_example_runs() -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text(encoding="utf-8")
    section = guide.split("### Tools from plain functions", 1)[1]
    block = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {"__name__": "guide_example"}
    exec(compile(block, "docs/guide.md", "exec"), namespace)
    assert namespace["set_apn"].args is not None

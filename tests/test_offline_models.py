"""Offline models: the built-in `test` alias, script files and Python functions.

Nothing here mounts respx: the requests go to `in-process.invalid`, which only
the in-process transport answers, so a request that took any other path would
fail to resolve. LiteLLM builds each request and the production SSE reader
parses the answer.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field
from support import definitions

from orchestrator import Side, ThreadState, ToolResult, define_agent, define_prompt, define_tool
from orchestrator.cli.main import main
from orchestrator.core.settings import RuntimeSettings
from orchestrator.definitions.loader import load_definitions
from orchestrator.definitions.schema import tool_parameters
from orchestrator.runtime import Runtime
from orchestrator.storage.sqlite import SQLiteStorage
from providers.config import ConfigError, config_from_dict, load_config
from providers.test_model import example_arguments

ROOT = Path(__file__).resolve().parent.parent

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"q": {"type": "string", "minLength": 12, "maxLength": 20}}, "required": ["q"]},
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 7, "maximum": 9, "multipleOf": 4}}},
    {"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5}}},
    {
        "type": "object",
        "properties": {"kind": {"enum": ["a", "b"]}, "fixed": {"const": 3}, "flag": {"type": "boolean"}},
    },
    {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 2},
                "minItems": 3,
                "maxItems": 3,
                "uniqueItems": True,
            }
        },
    },
    {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
        },
    },
    {
        "type": "object",
        "properties": {"maybe": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/Item"}]}},
        "$defs": {
            "Item": {
                "type": "object",
                "properties": {"sku": {"type": "string"}},
                "required": ["sku"],
                "additionalProperties": False,
            }
        },
    },
    {"type": "object", "properties": {"opt": {"type": ["string", "null"]}}, "additionalProperties": False},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_generated_arguments_are_valid_and_deterministic(schema: dict[str, Any]) -> None:
    values = [example_arguments(schema, seed=seed, salt="tool") for seed in range(20)]
    for value in values:
        jsonschema.validate(value, schema)
    assert values == [example_arguments(schema, seed=seed, salt="tool") for seed in range(20)]


def test_the_seed_changes_the_arguments() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10**6}}}
    assert len({example_arguments(schema, seed=seed)["n"] for seed in range(10)}) > 5


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "gemini"])
def test_arguments_for_every_example_tool_validate_under_its_own_args_model(dialect: str) -> None:
    defs = load_definitions(ROOT / "agents")
    for name in defs.callable_names():
        args = defs.resolve_callable(name).args
        params = tool_parameters(args, dialect)
        value = example_arguments(params, seed=3, salt=name)
        jsonschema.validate(value, params)
        if args is not None:
            args.model_validate(value)  # what the executor will do with them


# -- the built-in alias ------------------------------------------------------------


def test_every_config_has_the_test_alias_unless_it_defines_its_own() -> None:
    assert load_config(ROOT / "configs" / "default.yaml").model_info("test").provider_type == "offline"
    assert config_from_dict({}).model_info("test").model == "openai/test"
    own = config_from_dict({"providers": {"openai": {}}, "models": {"test": {"provider": "openai", "model": "gpt-4o"}}})
    assert own.model_info("test").provider_type == "openai"


class _Order(BaseModel):
    order_id: str = Field(description="the order", min_length=3)
    quantity: int = Field(ge=1, le=5)


async def _lookup(state: ThreadState, args: _Order) -> ToolResult:
    return ToolResult(status="success", result=f"order {args.order_id} x{args.quantity}")


class _Reason(BaseModel):
    reason: str


async def _end(state: ThreadState, args: _Reason) -> ToolResult:
    return ToolResult(status="success", result="bye")


def _defs(*, end_tool: bool = True) -> Any:
    return definitions(
        tools={
            "lookup": define_tool(description="Look up", args=_Order, execute=_lookup),
            "end_chat": define_tool(description="End", args=_Reason, execute=_end),
        },
        prompts={
            "agent": define_prompt(prompt="You help.", tools=("lookup",), tool_description="help"),
            "customer": define_prompt(
                prompt="You ask.", tools=("end_chat",) if end_tool else (), tool_description="ask"
            ),
        },
        agents={
            "chat": define_agent(type="ai_human", side_a=Side("agent")),
            "duo": define_agent(
                type="dual_ai",
                side_a=Side("agent"),
                side_b=Side("customer", end_conversation_tool="end_chat" if end_tool else None),
                max_session_turns=4,
            ),
        },
    )


def _runtime(tmp_path: Path, defs: Any, config: dict[str, Any] | None = None, model: str | None = "test") -> Runtime:
    return Runtime(
        defs,
        config=config_from_dict(config or {}),
        storage=SQLiteStorage(str(tmp_path / f"t{len(list(tmp_path.glob('*.db')))}.db")),
        settings=RuntimeSettings(model=model),
    )


async def test_test_model_calls_each_tool_then_names_the_results(tmp_path: Path) -> None:
    async with _runtime(tmp_path, _defs()) as runtime:
        thread = await runtime.create_thread("chat")
        result = await thread.send("Hi")
        messages = (await thread.get_messages()).messages
    [call_step] = [m for m in messages if m.tool_calls]
    assert [c.name for c in call_step.tool_calls] == ["lookup"]
    [tool] = [m for m in messages if m.role == "tool"]
    assert tool.tool_status == "success", tool.content  # the generated arguments passed validation
    assert result.output is not None and "lookup ->" in result.output and tool.content in result.output
    assert result.step_count == 2


async def test_a_dual_ai_agent_on_test_ends_by_its_end_tool(tmp_path: Path) -> None:
    async with _runtime(tmp_path, _defs()) as runtime:
        result = await (await runtime.create_thread("duo")).run()
    assert (result.reason, result.stopped_by) == ("end_conversation", "b")


async def test_a_dual_ai_agent_on_test_without_an_end_tool_ends_by_max_session_turns(tmp_path: Path) -> None:
    async with _runtime(tmp_path, _defs(end_tool=False)) as runtime:
        result = await (await runtime.create_thread("duo")).run()
    assert result.reason == "max_session_turns"


async def test_the_seed_param_reaches_the_model(tmp_path: Path) -> None:
    outputs = []
    for seed in (1, 2):
        config = {
            "providers": {"offline": {}},
            "models": {"seeded": {"provider": "offline", "model": "test", "params": {"seed": seed}}},
        }
        async with _runtime(tmp_path, _defs(), config, model="seeded") as runtime:
            thread = await runtime.create_thread("chat")
            await thread.send("Hi")
            [call] = [m for m in (await thread.get_messages()).messages if m.tool_calls]
            outputs.append(call.tool_calls[0].arguments)
    assert outputs[0] != outputs[1]


# -- scripts and functions ------------------------------------------------------------


async def test_a_yaml_file_of_turns_answers(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text(
        textwrap.dedent("""\
        - text: Checking.
          tool_calls: [{name: lookup, arguments: {order_id: A1002, quantity: 2}}]
        - text: It ships tomorrow.
        """)
    )
    config = {"models": {"mine": {"provider": "offline", "model": str(script)}}}
    async with _runtime(tmp_path, _defs(), config, model="mine") as runtime:
        result = await (await runtime.create_thread("chat")).send("Where is it?")
        assert result.output == "It ships tomorrow."


async def test_a_python_function_answers(tmp_path: Path) -> None:
    module = tmp_path / "fake.py"
    module.write_text(
        "def answer(body):\n    return 'echo: ' + body['messages'][-1]['content']\n"
        "def broken(body):\n    raise KeyError('Oslo')\n"
    )
    config = {
        "models": {
            "fn": {"provider": "offline", "model": f"{module}:answer"},
            "bad": {"provider": "offline", "model": f"{module}:broken"},
        }
    }
    async with _runtime(tmp_path, _defs(), config, model="fn") as runtime:
        result = await (await runtime.create_thread("chat")).send("ping")
        assert result.output == "echo: ping"
    runtime = _runtime(tmp_path, _defs(), config, model="bad")
    async with runtime:
        with pytest.raises(Exception, match=r"offline model .*broken' raised KeyError: 'Oslo'"):
            await (await runtime.create_thread("chat")).send("ping")


def test_offline_models_are_checked_when_the_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "models:\n  mine:\n    provider: offline\n    model: missing.yaml\n"
        "  fn:\n    provider: offline\n    model: not a function\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}, line 4: models.mine.model: missing.yaml: cannot read the script" in str(err.value)
    assert f"{path}, line 7: models.fn.model: expected 'test'" in str(err.value)


# -- the CLI ----------------------------------------------------------------------------


def test_cli_runs_an_own_agent_on_test_with_no_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(
        main, ["run", "support_chat", "--model", "test", "-m", "Hi", "--db", str(tmp_path / "c.db")]
    )
    assert result.exit_code == 0, result.output
    assert "⚙ lookup_order" in result.output and "test model: lookup_order ->" in result.output


def test_cli_runs_a_script_file_as_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    script = tmp_path / "turns.yaml"
    script.write_text("- text: Scripted hello.\n")
    result = CliRunner().invoke(
        main, ["run", "support_chat", "--model", str(script), "-m", "Hi", "--db", str(tmp_path / "c.db")]
    )
    assert result.exit_code == 0, result.output
    assert "Scripted hello." in result.output


def test_cli_runs_a_function_from_a_module_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "agents", tmp_path / "agents")
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "fake_model.py").write_text("def answer(body):\n    return {'text': 'from a function'}\n")
    (tmp_path / "broken_model.py").write_text("raise RuntimeError('no luck')\n")
    result = CliRunner().invoke(
        main, ["run", "support_chat", "--model", "fake_model:answer", "-m", "Hi", "--db", ":memory:"]
    )
    assert result.exit_code == 0, result.output
    assert "from a function" in result.output
    result = CliRunner().invoke(
        main, ["run", "support_chat", "--model", "broken_model:answer", "-m", "Hi", "--db", ":memory:"]
    )
    assert result.exit_code == 1
    assert "cannot import broken_model: RuntimeError: no luck" in result.output and "Traceback" not in result.output

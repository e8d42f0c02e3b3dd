"""The `orchestrator` command: `check`, `tools`, and a fast `--help`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import click
from click.testing import CliRunner

from orchestrator.cli.main import main

REPO = Path(__file__).resolve().parents[1]
FIVE_MISTAKES = REPO / "tests" / "fixtures" / "five_mistakes"


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_main_is_a_click_group_with_the_commands() -> None:
    assert isinstance(main, click.Group)
    assert {"check", "tools"} <= set(main.commands)


def test_check_passes_on_the_examples() -> None:
    code, out = invoke("check", str(REPO / "agents"))
    assert code == 0, out
    assert re.search(r"\d+ tools, \d+ prompts, \d+ agents, \d+ hooks?; no problems", out)


def test_check_reports_all_five_mistakes() -> None:
    code, out = invoke("check", str(FIVE_MISTAKES))
    assert code == 1
    problem_lines = [line for line in out.splitlines() if line.endswith("]")]
    rules = sorted(line.rsplit("[", 1)[1].rstrip("]") for line in problem_lines)
    assert rules == sorted(["snake-case", "nested-folder", "missing-definition", "import-error", "unknown-reference"])
    assert f"{FIVE_MISTAKES}/tools/broken_import.py:5: cannot import: ModuleNotFoundError" in out
    assert "LookupOrder.py" in out and "tools/extras" in out and "no_definition.py" in out
    assert "did you mean 'lookup_order'?" in out
    assert "5 problems found" in out


def test_check_defaults_to_agents_in_the_working_directory(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, out = invoke("check")
    assert code == 1 and "agents: the definitions folder does not exist [root]" in out


def test_check_warns_about_dialects_without_failing(tmp_path: Path) -> None:
    tools = tmp_path / "defs" / "tools"
    tools.mkdir(parents=True)
    (tools / "label.py").write_text(
        textwrap.dedent(
            """\
            from pydantic import BaseModel
            from orchestrator import ToolResult, define_tool


            class Args(BaseModel):
                labels: dict[str, int]


            async def execute(state, args):
                return ToolResult(status="success")


            tool = define_tool(description="Label things", args=Args, execute=execute)
            """
        )
    )
    code, out = invoke("check", str(tmp_path / "defs"))
    assert code == 0, out
    assert "warning: label: cannot be offered to gemini" in out
    assert "note: label: sent to openai with strict: false (labels: a record" in out


def test_tools_json_lists_tools_prompts_and_schemas() -> None:
    code, out = invoke("tools", "--json", "--path", str(REPO / "agents"))
    assert code == 0
    entries = json.loads(out)
    by_name = {e["name"]: e for e in entries}
    assert by_name["support_agent"]["kind"] == "prompt" and by_name["lookup_order"]["kind"] == "tool"
    lookup = by_name["lookup_order"]
    assert set(lookup) == {"name", "kind", "description", "parameters", "strict"}
    assert lookup["strict"] is True
    assert lookup["parameters"] == {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "Order ID, e.g. A1001"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    assert by_name["get_current_time"]["parameters"]["properties"] == {}


def test_tools_dialects() -> None:
    _, out = invoke("tools", "--json", "--path", str(REPO / "agents"), "--dialect", "gemini")
    weather = {e["name"]: e for e in json.loads(out)}["get_weather"]
    assert "strict" not in weather
    assert weather["parameters"]["required"] == ["city"]
    assert "additionalProperties" not in json.dumps(weather)
    _, out = invoke("tools", "--json", "--path", str(REPO / "agents"), "--dialect", "anthropic")
    weather = {e["name"]: e for e in json.loads(out)}["get_weather"]
    assert weather["parameters"]["properties"]["units"]["default"] == "metric"
    code, out = invoke("tools", "--dialect", "mistral")
    assert code == 2 and "mistral" in out


def test_tools_text_listing() -> None:
    code, out = invoke("tools", "--path", str(REPO / "agents"))
    assert code == 0
    assert "lookup_order (tool): Look up an order by ID." in out
    assert "    order_id (string, required): Order ID, e.g. A1001" in out
    assert "get_current_time (tool)" in out and "(no arguments)" in out


def test_tools_on_a_broken_folder_fails_with_every_problem() -> None:
    code, out = invoke("tools", "--path", str(FIVE_MISTAKES))
    assert code == 1
    assert "5 problems in the definitions:" in out


def test_help_is_fast_and_does_not_import_litellm_or_build_the_models() -> None:
    """`--help` loads click and the command table: not LiteLLM or the HTTP stack, and not the pydantic
    models of `orchestrator.definitions.define` and `orchestrator.core.messages` (half of its time on a slow machine,
    when `import orchestrator` imported them)."""
    code = textwrap.dedent(
        """\
        import sys
        from orchestrator.cli.main import main
        try:
            main(["--help"])
        except SystemExit:
            pass
        modules = ("litellm", "openai", "httpx", "aiosqlite")
        modules += ("orchestrator.definitions.define", "orchestrator.core.messages")
        heavy = [m for m in modules if m in sys.modules]
        print("HEAVY", heavy)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Commands:" in out and "check" in out and "tools" in out
    assert "HEAVY []" in out


def test_serve_and_worker_share_their_common_options() -> None:
    """A server handing executions to Temporal and its workers read the same names, env variables and defaults:
    each shared option is one definition (orchestrator/cli/options.py). Before, each command spelled its own copy,
    and `--config` had a default on one and not the other, `--redis` another destination name."""
    from orchestrator.cli.worker import worker
    from orchestrator.server.cli import serve

    def option(command: click.Command, name: str) -> dict[str, object]:
        [found] = [p for p in command.params if f"--{name}" in p.opts]
        assert isinstance(found, click.Option)
        return {k: getattr(found, k) for k in ("name", "opts", "envvar", "default", "multiple", "show_default")} | {
            "type": found.type.to_info_dict()
        }

    shared = ("path", "config", "redis", "temporal", "namespace", "task-queue", "heartbeat-timeout")
    for name in shared:
        assert option(serve, name) == option(worker, name), name
    by_opt = {p.opts[0]: p for p in worker.params}
    assert isinstance(by_opt["--temporal"], click.Option) and by_opt["--temporal"].required
    assert not next(p for p in serve.params if p.opts[0] == "--temporal").required


def test_check_reports_a_misspelled_placeholder_and_every_problem_of_a_file(tmp_path: Path) -> None:
    """Before: `check` said "no problems" while the model received `{customer_nmae}`, and a file with two
    problems showed the second only once the first was fixed."""
    defs = tmp_path / "defs"
    for folder in ("prompts", "agents", "tools"):
        (defs / folder).mkdir(parents=True)
    (defs / "prompts" / "support.py").write_text(
        textwrap.dedent(
            """\
            from orchestrator import define_prompt

            prompt = define_prompt(
                prompt="Help {customer_nmae}.",
                variables={"customer_name": "a customer"},
                tool_description="Support",
            )
            """
        )
    )
    (defs / "agents" / "chat.py").write_text(
        'from orchestrator import Side, define_agent\n\nagent = define_agent(type="ai_human", side_a=Side("support"))\n'
    )
    (defs / "tools" / "bad.py").write_text(
        "from orchestrator import define_tool\n\n\ndef execute(state):\n    return None\n\n\n"
        'tool = define_tool(description="", execute=execute)\n'
    )
    code, out = invoke("check", str(defs))
    assert code == 1
    assert f"{defs}/prompts/support.py:4: prompt 'support': placeholder {{customer_nmae}}" in out
    assert "did you mean 'customer_name'?" in out
    assert f"{defs}/tools/bad.py:8: define_tool: 'description' must be a non-empty string" in out
    assert f"{defs}/tools/bad.py:8: define_tool: 'execute' must be an async function" in out
    assert "3 problems found" in out

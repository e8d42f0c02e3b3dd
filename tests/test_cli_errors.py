"""What a person sees when something is wrong: one block, no traceback, exit 1;
every config problem at once; piped input; tool failures in full; the summary."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import main
from providers.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), input=stdin, env={"COLUMNS": "400"})  # no wrapping by rich
    return result.exit_code, result.output


def _write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def test_a_config_typo_in_run_prints_every_problem_without_a_traceback(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "bad.yaml",
        """\
        providers:
          openai:
            type: openia
        models:
          fast: {provider: openai, model: gpt-4o-mini}
        default_model: fast
        runtime:
          tool_timout: 3
        """,
    )
    code, out = _run("run", "support_demo", "--config", str(config))
    assert code == 1
    assert "Traceback" not in out
    assert f"{config}, line 3: providers.openai.type: unknown provider type 'openia' (did you mean 'openai'?)" in out
    assert f"{config}, line 8: runtime.tool_timout: unknown field (did you mean 'tool_timeout'?)" in out


def test_traceback_flag_shows_the_traceback(tmp_path: Path) -> None:
    config = _write(tmp_path / "bad.yaml", "models: {x: {provider: nowhere, model: m}}\n")
    result = CliRunner().invoke(main, ["run", "support_demo", "--config", str(config), "--traceback"])
    assert result.exit_code == 1 and isinstance(result.exception, ConfigError)


def test_all_config_problems_are_reported_at_once(tmp_path: Path) -> None:
    import orchestrator.core.settings  # noqa: F401 - registers the runtime section

    config = _write(
        tmp_path / "c.yaml",
        """\
        providers:
          openai: {}
        models:
          fast:
            provider: openai
            model: gpt-4o-mini
            timeout: -1
          slow:
            provider: opneai
            model: x
            fallbacks: [fsat]
        default_model: fst
        runtime:
          default_max_steps: 0
        """,
    )
    with pytest.raises(ConfigError) as err:
        load_config(config)
    text = str(err.value)
    assert "(5 problems)" in text
    for line, fragment in [
        (7, "models.fast.timeout"),
        (9, "unknown provider 'opneai' (did you mean 'openai'?)"),
        (11, "unknown fallback alias 'fsat' (did you mean 'fast'?)"),
        (12, "default_model 'fst'"),
        (14, "runtime.default_max_steps"),
    ]:
        assert f"{config}, line {line}: " in text and fragment in text


def test_a_provider_named_after_no_family_needs_a_type(tmp_path: Path) -> None:
    config = _write(tmp_path / "c.yaml", "providers:\n  mycorp: {base_url: 'http://x.invalid'}\n")
    with pytest.raises(ConfigError, match=r"line 2: providers.mycorp: unknown provider type 'mycorp'"):
        load_config(config)


def test_check_with_config_reports_a_prompts_unknown_alias(tmp_path: Path) -> None:
    defs = tmp_path / "agents"
    shutil.copytree(REPO / "agents", defs)
    prompt = defs / "prompts" / "support_agent.py"
    prompt.write_text(prompt.read_text().replace("model=None,", 'model="smrt",'))
    config = _write(
        tmp_path / "c.yaml",
        "providers: {openai: {}}\nmodels:\n  smart: {provider: openai, model: gpt-4o}\ndefault_model: smart\n",
    )
    code, out = _run("check", str(defs), "--config", str(config))
    assert code == 1
    line = next(i for i, text in enumerate(prompt.read_text().splitlines(), 1) if "model=" in text)
    assert (
        f"{prompt}:{line}: prompt 'support_agent' (its model='smrt'): "
        "unknown model alias 'smrt' (did you mean 'smart'?)" in out
    )
    code, out = _run("run", "support_chat", "--path", str(defs), "--config", str(config), "-m", "hi")
    assert code == 1 and "prompt 'support_agent'" in out and "Traceback" not in out


def test_check_with_config_passes_on_the_examples() -> None:
    code, out = _run("check", "agents", "--config", "configs/default.yaml")
    assert code == 0, out
    assert "every prompt's model exists" in out


def test_unknown_agent_is_one_line() -> None:
    code, out = _run("run", "nope", "--model", "test", "--db", ":memory:")
    assert code == 1 and "unknown agent 'nope'" in out and "Traceback" not in out


# -- piped input --------------------------------------------------------------------


def test_each_piped_line_is_a_persons_message(tmp_path: Path) -> None:
    code, out = _run(
        "run", "support_chat", "--model", "test", "--db", str(tmp_path / "p.db"), stdin="Hi\n\nWhere is A1002?\n"
    )
    assert code == 0, out
    assert "[B · person] Hi" in out and "[B · person] Where is A1002?" in out
    assert out.count("test model: lookup_order") == 2


def test_an_ai_human_run_with_no_message_is_an_error(tmp_path: Path) -> None:
    code, out = _run("run", "support_chat", "--model", "test", "--db", str(tmp_path / "p.db"), stdin="")
    assert code == 1
    assert "waits for a person's message: pass -m TEXT" in out


# -- tool failures and the summary ----------------------------------------------------------


def _failing_tool_defs(tmp_path: Path) -> Path:
    defs = tmp_path / "defs"
    for folder in ("tools", "prompts", "agents"):
        (defs / folder).mkdir(parents=True)
    _write(
        defs / "tools" / "weather.py",
        """\
        from pydantic import BaseModel
        from orchestrator import ThreadState, ToolResult, define_tool

        class Args(BaseModel):
            city: str

        async def execute(state: ThreadState, args: Args) -> ToolResult:
            cities = {}
            return ToolResult(status="success", result=cities["Oslo" + "x" * 150])

        tool = define_tool(description="Weather", args=Args, execute=execute)
        """,
    )
    _write(
        defs / "prompts" / "helper.py",
        """\
        from orchestrator import define_prompt

        prompt = define_prompt(prompt="Help.", tools=("weather",), tool_description="help")
        """,
    )
    _write(
        defs / "agents" / "chat.py",
        """\
        from orchestrator import Side, define_agent

        agent = define_agent(type="ai_human", side_a=Side("helper", max_steps=1))
        """,
    )
    return defs


def test_a_failing_tool_shows_type_and_full_message_and_the_traceback_on_request(tmp_path: Path) -> None:
    defs = _failing_tool_defs(tmp_path)
    base = ["run", "chat", "--path", str(defs), "--model", "test", "-m", "hi", "--db", str(tmp_path / "t.db")]
    code, out = _run(*base)
    assert code == 0, out
    assert "KeyError: 'Oslo" + "x" * 150 + "'" in out
    assert "line 9, in execute" not in out and "--traceback" in out
    code, out = _run(*base, "--traceback")
    assert 'weather.py", line 9, in execute' in out


def test_the_summary_says_a_turn_was_cut_by_max_steps(tmp_path: Path) -> None:
    """The first word is `result.reason` (`rest`: the thread waits), then how side a's turn ended."""
    defs = _failing_tool_defs(tmp_path)
    code, out = _run("run", "chat", "--path", str(defs), "--model", "test", "-m", "hi", "--db", str(tmp_path / "t.db"))
    summary = out[out.index("Stopped:") :]
    assert summary.startswith("Stopped: rest (side a's turn ended: max_steps; the thread waits for the next message)")
    assert "this execution: steps 1 (a 1, b 0)" in summary and "thread total: tokens in" in summary


def test_serve_with_a_config_typo_prints_the_problem_without_a_traceback(tmp_path: Path) -> None:
    config = _write(tmp_path / "bad.yaml", "models:\n  fast: {provider: openai, model: gpt-4o, timeout: 0}\n")
    code, out = _run("serve", "--config", str(config))
    assert code == 1 and "Traceback" not in out
    assert f"{config}, line 2: models.fast.provider: unknown provider 'openai'" in out


def test_an_unknown_model_flag_suggests_an_alias_and_names_no_file() -> None:
    code, out = _run("run", "support_chat", "--model", "fastt", "-m", "hi", "--db", ":memory:")
    assert code == 1 and "Traceback" not in out
    assert "--model fastt: not a model alias (did you mean 'fast'?)" in out
    assert "config file named above" not in out  # no file is named: the flag is wrong, not the config
    assert "Pass an alias the config defines, or an offline model" in out


def test_a_failed_record_writes_no_cassette_and_keeps_an_earlier_one(tmp_path: Path, monkeypatch) -> None:
    """A live `--record` without a key fails: before, it left an empty cassette `replay` then refused."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cassette = tmp_path / "run.json"
    chat = ("run", "support_chat", "-m", "hi", "--db", ":memory:")
    code, out = _run(*chat, "--model", "fast", "--record", str(cassette))
    assert code == 1 and "OPENAI_API_KEY" in out
    assert f"nothing recorded: the run failed, so {cassette} is not written" in out
    assert not cassette.exists() and list(tmp_path.iterdir()) == []

    recorded = tmp_path / "good.json"
    code, out = _run(*chat, "--model", "test", "--record", str(recorded))
    assert code == 0, out
    before = recorded.read_bytes()
    code, out = _run(*chat, "--model", "fast", "--record", str(recorded))
    assert code == 1 and f"so {recorded} is left as it was" in out
    assert recorded.read_bytes() == before
    meta = json.loads(before)["metadata"]
    assert (meta["agent"], meta["model"]) == ("support_chat", "test")  # `replay` runs it on `test` again


def test_replay_runs_on_the_model_the_session_was_recorded_on(tmp_path: Path) -> None:
    """A session recorded with `--model test` replays on `test` (before: on the prompts' own models, here
    the scripted `demo`, which nothing served)."""
    defs = _failing_tool_defs(tmp_path)
    cassette = tmp_path / "chat.json"
    code, out = _run("run", "chat", "--path", str(defs), "--model", "test", "-m", "hi", "--record", str(cassette))
    assert code == 0, out
    code, out = _run("replay", str(cassette), "--path", str(defs))
    assert code == 0 and "replay matches the recording" in out, out

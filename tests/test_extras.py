"""The lean install: the base package runs without its extras, and a missing extra is an error naming it.

The test environment has every extra installed, so a missing one is simulated: in a
subprocess a meta path finder refuses the optional packages, and in this process
`sys.modules[name] = None` makes their import fail as if they were not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.core.extras import MissingExtra, missing_extra_message, require

# What each extra brings; none of it may load for `import orchestrator` or the demo.
OPTIONAL = ("fastapi", "starlette", "uvicorn", "websockets", "asyncpg", "redis", "quickjs_rs", "wasmtime", "temporalio")

_BLOCKER = textwrap.dedent(
    """\
    import importlib.abc, sys

    OPTIONAL = {optional!r}

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in OPTIONAL:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    """
).format(optional=OPTIONAL)


def _python(code: str, cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["HOME"] = str(tmp_path)  # the demo's customer database goes under ~/.cache
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER + textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_message_names_the_extra_and_the_distribution() -> None:
    assert (
        missing_extra_message("orchestrator serve", "server")
        == "orchestrator serve needs the server extra: pip install 'orchestrator-runtime[server]'"
    )


def test_importing_orchestrator_loads_no_extra(tmp_path: Path) -> None:
    code = f"""\
        import sys
        import orchestrator, providers
        print("LOADED", sorted(m for m in sys.modules if m.partition(".")[0] in {OPTIONAL!r}))
    """
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stdout


def test_the_demo_runs_without_any_extra(tmp_path: Path) -> None:
    """`orchestrator run support_demo` in an empty folder, with every optional package refused."""
    code = f"""\
        from orchestrator.cli.main import main
        try:
            main(["run", "support_demo"])
        except SystemExit as exc:
            print("EXIT", exc.code)
        print("LOADED", sorted(m for m in sys.modules if m.partition(".")[0] in {OPTIONAL!r}))
    """
    done = _python(code, tmp_path, tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert "EXIT 0" in done.stdout, done.stdout + done.stderr
    assert "end_conversation" in done.stdout
    assert "LOADED []" in done.stdout


def test_serve_without_the_server_extra_names_it(tmp_path: Path) -> None:
    code = """\
        from orchestrator.cli.main import main
        main(["serve"])
    """
    done = _python(code, tmp_path, tmp_path)
    assert done.returncode == 1
    assert "orchestrator serve needs the server extra: pip install 'orchestrator-runtime[server]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_help_works_without_the_server_extra(tmp_path: Path) -> None:
    code = """\
        from orchestrator.cli.main import main
        main(["serve", "--help"])
    """
    done = _python(code, tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "orchestrator-runtime[server]" in " ".join(done.stdout.split())


def test_serve_names_the_extra_when_fastapi_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.server.cli import serve

    monkeypatch.setitem(sys.modules, "fastapi", None)
    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 1
    assert "orchestrator serve needs the server extra" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_a_postgresql_url_without_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.storage import open_storage

    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(MissingExtra) as caught:
        open_storage("postgresql://u@127.0.0.1/db")
    assert str(caught.value) == (
        "a postgresql:// storage URL needs the postgres extra: pip install 'orchestrator-runtime[postgres]'"
    )
    assert isinstance(caught.value, ImportError)  # hosts that guard with `except ImportError` keep working


def test_run_with_a_postgresql_url_without_asyncpg_prints_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from orchestrator.cli.main import main

    monkeypatch.setitem(sys.modules, "asyncpg", None)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["run", "support_demo", "--db", "postgresql://u@127.0.0.1/db"])
    assert result.exit_code == 1
    assert "needs the postgres extra: pip install 'orchestrator-runtime[postgres]'" in result.output
    assert "--traceback" not in result.output


def test_a_redis_url_without_redis_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.storage.broker import RedisBroker

    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(MissingExtra, match=r"a redis:// URL .* needs the postgres extra"):
        RedisBroker("redis://127.0.0.1:6379/0")


@pytest.mark.parametrize("language", ["javascript", "typescript"])
async def test_run_code_without_quickjs_is_an_error_result(monkeypatch: pytest.MonkeyPatch, language: str) -> None:
    from orchestrator.sandbox import run_code

    monkeypatch.setitem(sys.modules, "quickjs_rs", None)
    result = await run_code("export default 1 + 1", language=language)
    assert result.status == "error"
    assert result.error == (
        f"run_code in {language} needs the sandbox extra: pip install 'orchestrator-runtime[sandbox]'"
    )


async def test_python_run_code_without_monty_is_an_error_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.sandbox import run_code

    monkeypatch.setitem(sys.modules, "pydantic_monty", None)
    result = await run_code("1 + 1", language="python")
    assert result.status == "error"
    assert result.error == "run_code in python needs the sandbox extra: pip install 'orchestrator-runtime[sandbox]'"


def test_require_keeps_an_installed_package_s_own_import_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that is there but fails to import is not reported as a missing extra."""
    (tmp_path / "broken_pkg_for_extras.py").write_text("from os import no_such_name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError) as caught:
        require("broken_pkg_for_extras", feature="x", extra="y")
    assert not isinstance(caught.value, MissingExtra)


def test_the_worker_without_asyncpg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.worker import worker

    monkeypatch.setitem(sys.modules, "asyncpg", None)
    result = CliRunner().invoke(
        worker, ["--storage", "postgresql://u@127.0.0.1/db", "--temporal", "127.0.0.1:7233"], env={}
    )
    assert result.exit_code == 2
    assert "orchestrator worker needs the postgres extra: pip install 'orchestrator-runtime[postgres]'" in " ".join(
        result.output.split()
    )

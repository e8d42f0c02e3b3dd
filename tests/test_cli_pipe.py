"""`orchestrator run ... | head -1`: a closed pipe ends the command quietly, as Unix tools end.

Before, rich's console raised SystemExit(1) inside the session's watcher task: every run printed a
96-line "Task exception was never retrieved" dump on stderr, and 3 runs in 20 hung at exit (the
interpreter's finalization waiting on an import lock the LiteLLM import thread held). Now the
execution is stopped and stored, and the process exits with status 141 (128 + SIGPIPE, what a shell
shows for `yes | head -1`), so `set -o pipefail` sees the pipeline as it sees any producer cut short.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OFFLINE_NOTE = "(offline: replaying cassettes/support_demo.json; pass --model ALIAS to run live)"


def _orchestrator() -> str:
    script = Path(sys.executable).parent / "orchestrator"
    if script.exists():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -c 'from orchestrator.cli.main import main; main()'"


def _env(cache: Path) -> dict[str, str]:
    """As a person's shell has it: no keys; the request memo on, in a cache folder of the test's own (the
    first model request then needs no LiteLLM, so the exit comes while its import thread still runs)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["ORCHESTRATOR_REQUEST_MEMO"] = "1"
    env["XDG_CACHE_HOME"] = str(cache)
    return env


def _piped(command: str, cwd: Path, cache: Path, timeout: float = 120) -> tuple[int, str, str]:
    """`command | head -1` under `set -o pipefail`: the pipeline's status, head's line, the command's stderr."""
    err = cache / f"stderr-{os.urandom(6).hex()}.txt"
    script = f"set -o pipefail; {command} 2> {shlex.quote(str(err))} | head -1"
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=_env(cache), capture_output=True, text=True, timeout=timeout
    )
    stderr = err.read_text(encoding="utf-8")
    err.unlink()
    return done.returncode, done.stdout, stderr + done.stderr


@pytest.mark.slow
def test_run_piped_to_head_ends_quietly_every_time(tmp_path: Path) -> None:
    """50 runs, four at a time: each ends within its timeout (no hang), status 141, and nothing on
    stderr but the one line saying the demo replays its cassette."""
    work = tmp_path / "repo"
    work.mkdir()
    for name in ("agents", "configs", "cassettes"):
        os.symlink(REPO / name, work / name)
    command = f"{_orchestrator()} run support_demo"
    _piped(command, work, tmp_path)  # the request memo's first entry, as after a person's first run
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda _: _piped(command, work, tmp_path), range(50)))
    for status, out, err in runs:
        assert (status, err.splitlines()) == (141, [OFFLINE_NOTE]), err
        assert out.startswith("[A · support_agent] Hello"), out


def test_an_ai_human_run_stops_sending_once_its_output_closed(tmp_path: Path) -> None:
    """Messages after the pipe closed are not sent: the thread holds only what ran before the stop."""
    db = tmp_path / "chat.db"
    messages = " ".join(f"-m {shlex.quote(f'message {n}')}" for n in range(30))
    command = f"{_orchestrator()} run support_chat --model test --db {shlex.quote(str(db))} {messages}"
    status, out, err = _piped(command, REPO, tmp_path)
    assert (status, err) == (141, ""), err
    assert out.startswith("[B · person] message 0")

    import sqlite3

    with sqlite3.connect(db) as conn:
        texts = [row[0] for row in conn.execute("SELECT content FROM messages WHERE role = 'user'")]
        (status_row,) = conn.execute("SELECT status FROM threads").fetchall()
    assert texts and len(texts) < 30, texts
    assert status_row[0] != "running"  # stopped and stored, not left for a resume


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_without_pipefail_the_pipeline_is_heads(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "-c", f"{_orchestrator()} run support_demo 2>/dev/null | head -1 >/dev/null"],
        cwd=REPO,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0

"""Seeds and the simulated side: `defaults.seed` reaches the request of every model call of a run (run i:
seed + i - 1) where the provider takes one, is recorded in the cassette and the report, and replays;
side b's model and temperature are recorded per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.eval import Evaluator, ReplaySource, ScriptedSource, build_report, load_suite
from orchestrator.eval.report import markdown
from orchestrator.eval.sources import ScenarioScript
from providers.client import accepts_seed
from providers.offline import CallSpec, ResponseSpec

ROOT = Path(__file__).resolve().parent.parent

SHIP = ScenarioScript(
    a=[
        ResponseSpec(text="Hello, how can I help?"),
        ResponseSpec(tool_calls=[CallSpec(name="process_order", arguments={"order_id": "A1002", "action": "ship"})]),
        ResponseSpec(text="Your order A1002 has shipped."),
    ],
    b=[
        ResponseSpec(text="Please ship A1002."),
        ResponseSpec(text="Thanks!", tool_calls=[CallSpec(name="end_chat", arguments={"reason": "done"})]),
    ],
)


def _suite(tmp_path: Path, seed: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        (ROOT / "configs" / "default.yaml")
        .read_text()
        .replace("    model: demo\n", "    model: demo\n    params: {temperature: 0.7}\n", 1)
    )
    path = tmp_path / "suite.yaml"
    path.write_text(f"""\
agent: support_demo
definitions: {ROOT / "agents"}
config: {config}
cassettes: cas
defaults:
  models: {{a: demo, b: demo}}
  prompts: {{b: simulated_customer}}
  k: 2
  {seed}
scenarios:
  - id: ship
    arguments: {{persona: Kwame, goal: ship A1002}}
    checks: [{{values: {{"order_status:A1002": shipped}}}}]
""")
    return path


async def test_the_seed_goes_with_every_request_and_is_recorded(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, "seed: 7"))
    result = await Evaluator(suite, ScriptedSource(lambda s, i: SHIP), storage=":memory:").run()
    assert sorted((r.index, r.seed) for r in result.runs) == [(1, 7), (2, 8)]
    for run in result.runs:
        cassette = json.loads(Path(run.cassette or "").read_text())
        bodies = [i["request"]["body"] for i in cassette["interactions"]]
        assert len(bodies) == 5 and {b.get("seed") for b in bodies} == {6 + run.index}
        assert cassette["metadata"]["eval"]["seed"] == 6 + run.index
        sim = cassette["metadata"]["eval"]["simulator"]
        assert sim == {"alias": "demo", "model": "openai/demo", "temperature": 0.7}
        assert {b.get("temperature") for b in bodies} == {0.7}
    text = markdown(build_report(result))
    assert "Seeds 7–8, simulated user `demo` (openai/demo), temperature 0.7." in text
    replayed = await Evaluator(suite, ReplaySource(suite.cassette_dir()), storage=":memory:").run()
    assert all(r.passed and r.error is None for r in replayed.runs), [r.error for r in replayed.runs]

    # the recording holds the seed: a replay asked with another one no longer matches it
    other = load_suite(_suite(tmp_path, "seed: 100"))
    mismatched = await Evaluator(other, ReplaySource(suite.cassette_dir()), storage=":memory:").run()
    assert all(r.error and "replay mismatch" in r.error for r in mismatched.runs)


async def test_no_seed_by_default(tmp_path: Path) -> None:
    suite = load_suite(_suite(tmp_path, ""))
    result = await Evaluator(suite, ScriptedSource(lambda s, i: SHIP), storage=":memory:").run()
    cassette = json.loads(Path(result.runs[0].cassette or "").read_text())
    assert all("seed" not in i["request"]["body"] for i in cassette["interactions"])
    assert result.runs[0].seed is None and cassette["metadata"]["eval"]["seed"] is None


@pytest.mark.parametrize(
    ("provider_type", "model", "takes"),
    [
        (None, "openai/gpt-4o-mini", True),
        (None, "gemini/gemini-2.5-flash", True),  # LiteLLM maps it to generationConfig.seed
        (None, "anthropic/claude-sonnet-4-5", False),  # Anthropic's API has no seed
        ("scripted", "openai/demo", True),
        (None, "no_such_family/x", False),
    ],
)
def test_which_providers_take_a_seed(provider_type: str | None, model: str, takes: bool) -> None:
    assert accepts_seed(provider_type, model) is takes

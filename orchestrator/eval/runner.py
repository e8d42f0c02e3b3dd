"""Running a suite: every scenario k times, a bounded number at once, within a budget.

Each run is a real thread in the configured storage (the page can open it),
seeded with the scenario's KV values and files, run to its end, graded, and,
unless it is itself a replay, recorded to its own cassette with the metadata
`orchestrator eval replay` needs to run it again offline.

Runs are started run-index first (every scenario's run 1, then every run 2...)
so a budget stop leaves every scenario with runs rather than some with none.
"""

from __future__ import annotations

import asyncio
import dataclasses
import mimetypes
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from unittest import mock

from pydantic import BaseModel, Field

from orchestrator.cli.session import transcript
from orchestrator.core.results import AttachmentRef
from orchestrator.definitions.define import AgentDefinition, Side
from orchestrator.definitions.loader import Definitions
from orchestrator.engine.views import render_prompt
from orchestrator.eval.approvals import decide_waiting
from orchestrator.eval.grading import CheckOutcome, Spent, grade, judge_system, simulator_system
from orchestrator.eval.sources import ModelSource, cassette_path
from orchestrator.eval.stats import DEFAULT_CONFIDENCE, runs_for_width, wilson
from orchestrator.eval.suite import JudgeCheck, Scenario, SimulatorCheck, Suite
from orchestrator.eval.traffic import RunTraffic, routing, traffic_of
from orchestrator.runtime import Runtime, Thread
from providers.cassette import Recorder
from providers.client import seeded

__all__ = ["EvalRun", "Evaluator", "RunOutcome", "SimulatedSide"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # a key the config reads from the environment


class SimulatedSide(BaseModel):
    """The model that played the simulated user, as this run asked for it: a run's outcome depends on it."""

    alias: str | None
    model: str | None  # "family/name"
    temperature: float | None  # None: the provider's default


class RunOutcome(BaseModel):
    scenario: str
    index: int  # 1..k
    passed: bool
    checks: list[CheckOutcome] = Field(default_factory=list)
    error: str | None = None
    thread_id: str | None = None
    cassette: str | None = None
    reason: str | None = None  # how the execution ended
    stopped_by: str | None = None
    steps: int = 0
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    # a simulator check failed: the simulated user broke its instructions, so the run says nothing of the
    # agent and is left out of its rates (counted apart)
    simulator_fault: bool = False
    seed: int | None = None  # sent with the run's model requests where the provider takes one
    simulator: SimulatedSide | None = None  # who played side b (the simulated user) in this run


class EvalRun(BaseModel):
    suite: str
    agent: str
    source: str
    models: dict[str, str]
    k: dict[str, int]  # runs asked for, per scenario
    runs: list[RunOutcome]
    skipped: int = 0  # runs not started because the budget was spent
    stopped_on_budget: bool = False
    seconds: float = 0.0
    target_width: float | None = None  # --target-width: runs were added until intervals were this narrow


class Evaluator:
    """Runs one suite with one model source."""

    def __init__(
        self,
        suite: Suite,
        source: ModelSource,
        *,
        storage: str | None = None,
        cassettes: Path | None = None,
        on_run: Callable[[RunOutcome], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.suite = suite
        self.source = source
        self.cassettes = cassettes or suite.cassette_dir()
        self.on_run = on_run
        self._clock = clock
        self.runtime = Runtime.from_path(
            suite.resolve(suite.definitions), config=[suite.resolve(p) for p in suite.config], storage=storage
        )
        self.runtime.definitions = _adjusted(self.runtime.definitions, suite)
        self.tokens = 0
        self.cost = 0.0

    async def run(
        self,
        only: Sequence[str] = (),
        *,
        target_width: float | None = None,
        most_runs: int = 100,
        confidence: float = DEFAULT_CONFIDENCE,
    ) -> EvalRun:
        """Every scenario k times; with `target_width`, then more runs for each scenario whose pass rate's
        interval is still wider than that, until none is, a scenario has `most_runs`, or the budget is spent."""
        if target_width is not None and not self.source.records:
            raise ValueError("target_width adds runs: it needs a live or scripted source (a replay has its recordings)")
        scenarios = [s for s in self.suite.scenarios if not only or s.id in only]
        unknown = set(only) - {s.id for s in scenarios}
        if unknown:
            self.suite.scenario(sorted(unknown)[0])  # raises, naming the known ids
        plan = [
            (s, i)
            for i in range(1, max(self.suite.k_for(s) for s in scenarios) + 1)
            for s in scenarios
            if i <= self.suite.k_for(s)
        ]
        skipped: list[tuple[str, int]] = []
        results: list[RunOutcome] = []
        started = self._clock()
        async with self.runtime:
            with routing(), self._stand_in_keys():
                while plan:
                    results += await self._run_plan(plan, skipped)
                    if target_width is None or skipped:
                        break
                    plan = _more_runs(scenarios, results, target_width, most_runs, confidence)
        asked = {s.id: self.suite.k_for(s) for s in scenarios}
        for outcome in results:
            asked[outcome.scenario] = max(asked[outcome.scenario], outcome.index)
        return EvalRun(
            suite=str(self.suite.path),
            agent=self.suite.agent,
            source=self.source.label,
            models={str(side): alias for side, alias in self.suite.defaults.models.items()},
            k=asked,
            runs=results,
            skipped=len(skipped),
            stopped_on_budget=bool(skipped),
            seconds=round(self._clock() - started, 3),
            target_width=target_width,
        )

    async def _run_plan(self, plan: Sequence[tuple[Scenario, int]], skipped: list[tuple[str, int]]) -> list[RunOutcome]:
        """These runs, at most `concurrency` at once; one not started because the budget is spent goes to `skipped`."""
        gate = asyncio.Semaphore(self.suite.defaults.concurrency)
        budget = self.suite.defaults.budget

        async def guarded(scenario: Scenario, index: int) -> RunOutcome | None:
            async with gate:
                if budget is not None and budget.exceeded(self.tokens, self.cost):
                    skipped.append((scenario.id, index))
                    return None
                outcome = await self.run_one(scenario, index)
                self.tokens += outcome.input_tokens + outcome.output_tokens
                self.cost += outcome.cost
                if self.on_run is not None:
                    self.on_run(outcome)
                return outcome

        results = await asyncio.gather(*(guarded(s, i) for s, i in plan))
        return [r for r in results if r is not None]

    async def run_single(self, scenario_id: str, index: int) -> tuple[RunOutcome, list[dict[str, object]]]:
        """One run on its own (e.g. a replay), with the transcript it produced."""
        scenario = self.suite.scenario(scenario_id)
        async with self.runtime:
            with routing(), self._stand_in_keys():
                outcome = await self.run_one(scenario, index)
            thread = await self.runtime.get_thread(outcome.thread_id or "")
            messages = (await thread.get_messages(include_silent=True)).messages
        return outcome, transcript(messages)

    async def run_one(self, scenario: Scenario, index: int) -> RunOutcome:
        """One run of one scenario; never raises for what the agent or its models did."""
        started = self._clock()
        model = self.source.model_for(scenario.id, index, self._voices(scenario))
        path = cassette_path(self.cassettes, scenario.id, index)
        recorder = Recorder(path) if self.source.records else None
        spent = Spent()
        seed = None if self.suite.defaults.seed is None else self.suite.defaults.seed + index - 1
        with traffic_of(RunTraffic(model.router, recorder)), seeded(seed):
            thread = await self.runtime.create_thread(self.suite.agent, scenario.arguments)
            await self._seed(thread, scenario)
            result, error = None, None
            try:
                result = await decide_waiting(
                    self.suite, self.suite.approvals_for(scenario), thread, await thread.run()
                )
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            checks = await grade(self.suite, scenario, thread, result, error, spent, self.runtime.services.client)
        error = model.problem() or error  # after grading: a judge's request is part of the recording
        record = (await self.runtime.get_thread(thread.id)).record
        usage = record.usage
        outcome = RunOutcome(
            scenario=scenario.id,
            index=index,
            passed=error is None and all(c.passed for c in checks if c.kind != "simulator"),
            simulator_fault=any(not c.passed for c in checks if c.kind == "simulator"),
            checks=checks,
            error=error,
            thread_id=thread.id,
            cassette=str(path),
            reason=result.reason if result else None,
            stopped_by=result.stopped_by if result else None,
            steps=result.step_count if result else 0,
            turns=record.execution.turn_count if record.execution else 0,
            input_tokens=usage.input_tokens + spent.input_tokens,
            output_tokens=usage.output_tokens + spent.output_tokens,
            cost=round(usage.cost + spent.cost, 6),
            seconds=round(self._clock() - started, 3),
            seed=seed,
            simulator=self._simulator(),
        )
        if recorder is not None:
            await self._save(recorder, thread, scenario, outcome)
        return outcome

    def _stand_in_keys(self) -> AbstractContextManager[object]:
        """Replaying needs no key: the config's `${VAR}` keys missing here get stand-ins, which only
        ever reach the cassette's router (recordings hold no keys, and a replay never goes out)."""
        if self.source.records:
            return nullcontext()
        names = {m for p in self.suite.config for m in _ENV_REF.findall(self.suite.resolve(p).read_text("utf-8"))}
        return mock.patch.dict(os.environ, {n: f"stand-in-for-{n}" for n in sorted(names) if n not in os.environ})

    async def _seed(self, thread: Thread, scenario: Scenario) -> None:
        for key, value in scenario.state.values.items():
            await thread.state.set_value(key, value)
        for name, relative in scenario.state.files.items():
            data = self.suite.resolve(relative).read_bytes()
            mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
            ref = AttachmentRef(id=f"file_{uuid.uuid4().hex[:16]}", name=name, mime_type=mime, size=len(data))
            await self.runtime.storage.put_file(thread.id, ref, data)

    async def _save(self, recorder: Recorder, thread: Thread, scenario: Scenario, outcome: RunOutcome) -> None:
        messages = (await thread.get_messages(include_silent=True)).messages
        recorder.cassette.metadata.update(
            eval={
                "suite": str(self.suite.path),
                "scenario": scenario.id,
                "run": outcome.index,
                "models": dict(self.suite.defaults.models),
                "seed": outcome.seed,
                "simulator": outcome.simulator.model_dump() if outcome.simulator else None,
            },
            agent=self.suite.agent,
            arguments=scenario.arguments,
            transcript=transcript(messages),
            checks=[c.model_dump() for c in outcome.checks],
            passed=outcome.passed,
            error=outcome.error,
        )
        Path(recorder.path).parent.mkdir(parents=True, exist_ok=True)
        recorder.save()

    def _simulator(self) -> SimulatedSide | None:
        """Side b's model and temperature (from the config's model and provider params)."""
        agent = self.runtime.definitions.agents[self.suite.agent]
        if agent.side_b is None:
            return None
        config = self.runtime.services.client.config
        alias = self.runtime.definitions.prompts[agent.side_b.prompt].model or config.default_model
        if alias is None or alias not in config.models:
            return SimulatedSide(alias=alias, model=None, temperature=None)
        spec = config.models[alias]
        params = {**config.providers[spec.provider].params, **spec.params}
        temperature = params.get("temperature")
        return SimulatedSide(
            alias=alias,
            model=config.model_info(alias).model,
            temperature=float(temperature) if isinstance(temperature, int | float) else None,
        )

    def _voices(self, scenario: Scenario) -> dict[str, str]:
        """Each side's system message as this scenario renders it, and each judge's, -> who answers it."""
        definitions = self.runtime.definitions
        agent = definitions.agents[self.suite.agent]
        voices: dict[str, str] = {}
        for name, side in (("a", agent.side_a), ("b", agent.side_b)):
            if side is not None:
                prompt = definitions.prompts[side.prompt]
                voices[render_prompt(prompt.prompt, {**prompt.variables, **scenario.arguments})] = name
        for check in scenario.checks:
            if isinstance(check, JudgeCheck):
                voices[judge_system(check)] = "judge"
            elif isinstance(check, SimulatorCheck):
                voices[simulator_system(check, scenario)] = "judge"
        return voices


def _more_runs(
    scenarios: Sequence[Scenario], results: Sequence[RunOutcome], width: float, most: int, confidence: float
) -> list[tuple[Scenario, int]]:
    """The next runs for `--target-width`: for each scenario whose interval is still too wide, as many
    as Wilson's formula says the width needs at the rate seen so far, at most as many again as it has
    (the rate seen after a few runs is rough), never past `most`."""
    plan = []
    for scenario in scenarios:
        mine = [r for r in results if r.scenario == scenario.id]
        n, c = len(mine), sum(r.passed for r in mine)
        if not n or n >= most or wilson(c, n, confidence).width <= width:
            continue
        more = min(max(runs_for_width(c / n, width, confidence, most) - n, 1), n, most - n)
        start = max(r.index for r in mine)
        plan += [(scenario, start + i) for i in range(1, more + 1)]
    return sorted(plan, key=lambda item: item[1])


def _adjusted(definitions: Definitions, suite: Suite) -> Definitions:
    """The definitions with the suite's per-side models and max turns applied to its agent."""
    agents = dict(definitions.agents)
    prompts = dict(definitions.prompts)
    agent = agents.get(suite.agent)
    if agent is None:
        known = ", ".join(sorted(agents)) or "none"
        raise ValueError(f"{suite.path}: agent {suite.agent!r} is not defined in {suite.definitions} (known: {known})")
    update: dict[str, object] = {}
    if suite.defaults.max_turns is not None:
        update["max_session_turns"] = suite.defaults.max_turns
    for side_name, prompt_name in suite.defaults.prompts.items():
        side = _side(agent, side_name, suite, "prompts")
        if prompt_name not in prompts:
            known = ", ".join(sorted(prompts))
            raise ValueError(f"{suite.path}: defaults.prompts.{side_name}: no prompt {prompt_name!r} (known: {known})")
        update[f"side_{side_name}"] = side.model_copy(update={"prompt": prompt_name})
    agent = agent.model_copy(update=update)
    agents[suite.agent] = agent
    for side_name, alias in suite.defaults.models.items():
        side = _side(agent, side_name, suite, "models")
        prompts[side.prompt] = prompts[side.prompt].model_copy(update={"model": alias})
    return dataclasses.replace(definitions, agents=agents, prompts=prompts)


def _side(agent: AgentDefinition, name: str, suite: Suite, field: str) -> Side:
    side = agent.side_a if name == "a" else agent.side_b
    if side is None:
        raise ValueError(f"{suite.path}: defaults.{field}.{name}: agent {suite.agent!r} has no side {name}")
    return side

"""The pytest plugin for testing your own agents: record a conversation once, replay it offline.

Registered by the package's `pytest11` entry point, so installing the package
is enough. A test takes the `agent_runtime` fixture:

    async def test_refund_is_refused(agent_runtime):
        async with agent_runtime as runtime:
            thread = await runtime.create_thread("support_demo")
            result = await thread.run()
            await agent_runtime.assert_tool_calls(thread, [("lookup_order", {"order_id": "A1001"})])
            agent_runtime.assert_end_reason(result, "end_conversation", by="b")

Under pytest-asyncio's default strict mode, mark the test `@pytest.mark.asyncio`
(with anyio's plugin, `@pytest.mark.anyio`); in auto mode nothing is needed.
The fixture is synchronous and the runtime opens inside the test, in the
test's own event loop, so it works under any of them.

Each test has its cassette (`tests/cassettes/<module>/<test>.json`, or the path
of `@pytest.mark.cassette(...)`, relative to the test file). `--record-mode`
works as in vcrpy and pytest-recording: `none` (the default) replays and never
reaches the network; `once` records when the cassette does not exist yet;
`new_episodes` replays what was recorded and records what comes after;
`all` records afresh. While replaying, a request to a host outside loopback
fails at once with the host, the test and the command that records it.

Env values the tools declare (`variables=`) are named in the cassette, never
their values; a replay supplies stand-ins for those missing here, so a cassette
replays on a machine without them.

The low-level `replay_cassette` fixture (a factory: `replay_cassette(path)`
serves that cassette until the test ends) closes the network the same way for
the whole test: other respx mocks still answer their hosts, but a request that
would reach the real transport for a host outside loopback fails.

A cassette mismatch, or a request refused, is the test's failure message, first
and in a few lines, whatever the error it became inside LiteLLM and the runtime.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

import pytest

from orchestrator.testing import checks
from providers.cassette import Cassette, Recorder, Replayer, load_cassette

if TYPE_CHECKING:
    from pluggy import Result

    from orchestrator.engine.executor import ExecutionResult
    from orchestrator.runtime import Runtime, Thread

RECORD_MODES = ("none", "once", "new_episodes", "all")
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


class ModelRequestBlocked(BaseException):
    """A request left the machine during a replaying test.

    A BaseException on purpose: no retry loop or `except Exception` may turn it
    into a slow, vague failure; it ends the test at once.
    """


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("orchestrator", "orchestrator: recorded agent sessions")
    try:
        group.addoption(
            "--record-mode",
            choices=RECORD_MODES,
            default=None,
            help="none (default): replay only; once: record missing cassettes; "
            "new_episodes: record what comes after the recording; all: record afresh",
        )
    except ValueError:
        pass  # pytest-recording defines the same option with the same meaning: share it
    parser.addini("orchestrator_agents", "the definitions folder, from the rootdir", default="agents")
    parser.addini(
        "orchestrator_config", "config files, from the rootdir", type="linelist", default=["configs/default.yaml"]
    )
    parser.addini("orchestrator_cassettes", "where cassettes live, from the rootdir", default="tests/cassettes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cassette(path): this test's cassette, relative to the test file")


@pytest.fixture
def agent_runtime(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AgentRuntime]:
    """`async with agent_runtime as runtime:` a runtime on your agents, replaying or recording this test's cassette."""
    harness = AgentRuntime(request, tmp_path)
    if not harness.replaying:
        yield harness
    else:
        with closed_network(harness._refusal, harness._problems.blocked):
            yield harness
            harness._problems.stop_replays()  # inside the guard: respx's patch sits on top of it
    harness._raise_pending()


@pytest.fixture
def replay_cassette(request: pytest.FixtureRequest) -> Iterator[Callable[[str | Path | Cassette], Replayer]]:
    """Factory: `replay_cassette(path)` serves a cassette until the test ends; the network stays closed meanwhile.

    A mismatch fails the test with the cassette's first difference; a request for a host the cassette does not
    hold fails it too (respx mocks started in the test still answer their own hosts; loopback stays open).
    """
    problems = _problems(request.node)
    nodeid = request.node.nodeid

    def refusal(host: str) -> str:
        return (
            f"{nodeid}: a request to {host} left the machine while replaying a cassette; the cassettes this "
            "test replays do not hold that host and nothing else mocks it, so it was refused"
        )

    def start(path: str | Path | Cassette) -> Replayer:
        replayer = Replayer(path)
        problems.replays.append(_Replay(replayer, "" if isinstance(path, Cassette) else str(path)))
        replayer.start()
        return replayer

    with closed_network(refusal, problems.blocked):
        yield start
        problems.stop_replays()  # inside the guard: respx's patch sits on top of it
    problems.fail_if_unreported()


# -- what failed, said first ---------------------------------------------------------


@dataclass
class _Replay:
    replayer: Replayer
    where: str  # the cassette's path, as the test gave it ("" for one built in memory)
    again: str | None = None  # the command that records this test again

    def message(self) -> str | None:
        mismatch = self.replayer.mismatch
        if mismatch is None:
            return None
        again = f"\nto record this test again: {self.again}" if self.again else ""
        where = f" in {self.where}" if self.where else ""
        return f"CassetteMismatch{where}: {mismatch}{again}"


@dataclass
class _Problems:
    """One test's replays and refused requests, so its failure can name them first (see the report hook)."""

    replays: list[_Replay] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    reported: bool = False

    def stop_replays(self) -> None:
        for replay in reversed(self.replays):
            replay.replayer.stop()

    def messages(self) -> list[str]:
        found = [m for r in self.replays if (m := r.message())]
        return [*self.blocked[:1], *found[:1]]

    def fail_if_unreported(self) -> None:
        """At teardown: a problem the test swallowed (a retry loop, `except Exception`) still fails it."""
        messages = self.messages()
        if messages and not self.reported:
            self.reported = True
            raise pytest.fail.Exception("\n".join(messages), pytrace=False) from None


_PROBLEMS = pytest.StashKey[_Problems]()


def _problems(item: pytest.Item) -> _Problems:
    if _PROBLEMS not in item.stash:
        item.stash[_PROBLEMS] = _Problems()
    return item.stash[_PROBLEMS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Result[Any], None]:
    """A failed test whose cassette did not match (or whose request was refused) reports that, in a few lines.

    Inside the runtime a mismatch becomes LiteLLM's APIConnectionError, then a ProviderError, then an
    ExecutionFailed: pages of chained tracebacks whose cause is the last line. The report says the cause.
    """
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    problems = item.stash.get(_PROBLEMS, None)
    if problems is None or not report.failed or problems.reported:
        return
    messages = problems.messages()
    if messages:
        problems.reported = True
        error = call.excinfo.typename if call.excinfo is not None else None
        seen = (
            f"\n(in the test it surfaced as {error})" if error and error not in ("Failed", "CassetteMismatch") else ""
        )
        report.longrepr = "\n".join(messages) + seen


class AgentRuntime:
    """One test's runtime, cassette and assertions. Open it with `async with`."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        config = request.config
        root = config.rootpath
        self.nodeid = request.node.nodeid
        self.mode: str = config.getoption("--record-mode", default=None) or "none"
        self.cassette_path = _cassette_path(request, root / config.getini("orchestrator_cassettes"))
        self._where = str(self.cassette_path.relative_to(root) if self.cassette_path.is_relative_to(root) else "")
        self.agents = root / config.getini("orchestrator_agents")
        self.configs = [root / c for c in config.getini("orchestrator_config")]
        self._db = tmp_path / "agent_runtime.db"
        self.model: str | None = None  # run every prompt on this model alias (set before `async with`)
        self._runtime: Runtime | None = None
        self._replayer: Replayer | None = None
        self._recorder: Recorder | None = None
        self._problems = _problems(request.node)

    @property
    def record_command(self) -> str:
        return f'pytest "{self.nodeid}" --record-mode=once'

    @property
    def replaying(self) -> bool:
        """True when the cassette serves the requests (and the network is closed)."""
        return self.mode == "none" or (self.mode in ("once", "new_episodes") and self.cassette_path.exists())

    # -- lifecycle -------------------------------------------------------------
    async def __aenter__(self) -> Runtime:
        from orchestrator.runtime import Runtime

        definitions_env = _declared_env(self.agents)
        if self.replaying:
            if not self.cassette_path.exists():
                pytest.fail(f"no cassette at {self.cassette_path}: record it with {self.record_command}", pytrace=False)
            cassette = load_cassette(self.cassette_path)
            stand_ins = {
                name: f"stand-in-for-{name}" for name in cassette.metadata.get("env", []) if name not in os.environ
            }
            self._replayer = Replayer(cassette, on_exhausted="pass" if self.mode == "new_episodes" else "fail")
            again = self.record_command.replace("once", "all")
            self._problems.replays.append(_Replay(self._replayer, self._where or str(self.cassette_path), again))
            self._replayer.start()
        else:
            stand_ins = {}
        if not self.replaying or self.mode == "new_episodes":
            present = sorted(name for name in definitions_env if name in os.environ)
            self.cassette_path.parent.mkdir(parents=True, exist_ok=True)
            self._recorder = Recorder(
                self.cassette_path,
                secrets=[os.environ[n] for n in present],
                metadata={"env": present, "test": self.nodeid},
            )
            self._recorder.start()
        runtime = Runtime.from_path(self.agents, config=self.configs, storage=f"sqlite:///{self._db}", model=self.model)
        runtime.settings.env.update(stand_ins)
        self._runtime = await runtime.open()
        return self._runtime

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._runtime is not None:
                await self._runtime.close()
        finally:
            if self._replayer is not None:
                self._replayer.stop()
            if self._recorder is not None:
                self._recorder.stop()  # writes the cassette
        self._raise_pending()

    def _raise_pending(self) -> None:
        self._problems.fail_if_unreported()

    def _refusal(self, host: str) -> str:
        return (
            f"{self.nodeid}: a request to {host} left the machine while replaying "
            f"{self.cassette_path.name}; no cassette, scripted or test model serves it. "
            f"Record it with: {self.record_command}"
        )

    # -- assertions (shared with orchestrator.testing.checks) --------------------------
    async def assert_tool_calls(
        self, thread: Thread, expected: Sequence[checks.ExpectedCall], *, ordered: bool = True
    ) -> None:
        """Each expected call was made (a name, or a name and a subset of its arguments), in order if `ordered`."""
        _assert(checks.check_tool_calls(await checks.calls_made(thread), expected, ordered=ordered))

    async def assert_no_tool_call(self, thread: Thread, forbidden: checks.ExpectedCall) -> None:
        _assert(checks.check_no_tool_call(await checks.calls_made(thread), forbidden))

    async def assert_values(self, thread: Thread, expected: Mapping[str, Any], *, subset: bool = False) -> None:
        """The thread's KV store holds these values (equal, or containing them with `subset`)."""
        _assert(await checks.check_values(thread, expected, subset=subset))

    def assert_end_reason(self, result: ExecutionResult, reason: str, *, by: str | None = None) -> None:
        _assert(checks.check_end_reason(result, reason, by=by))


@contextmanager
def closed_network(refusal: Callable[[str], str], blocked: list[str]) -> Iterator[None]:
    """Refuse any request that reaches httpcore's real transport for a host outside loopback.

    respx mocks started inside keep answering their hosts (they sit in front); what they pass through
    reaches this guard. Each refusal's message (`refusal(host)`) is kept in `blocked` and raised as
    `ModelRequestBlocked`, which no `except Exception` swallows.
    """
    import httpcore

    def refuse(request: Any) -> None:
        host = request.url.host.decode() if isinstance(request.url.host, bytes) else str(request.url.host)
        if host in _LOOPBACK:
            return
        message = refusal(host)
        blocked.append(message)
        raise ModelRequestBlocked(message)

    async_original = httpcore.AsyncConnectionPool.handle_async_request
    sync_original = httpcore.ConnectionPool.handle_request

    async def guarded_async(pool: Any, request: Any) -> Any:
        refuse(request)
        return await async_original(pool, request)

    def guarded_sync(pool: Any, request: Any) -> Any:
        refuse(request)
        return sync_original(pool, request)

    # respx wraps the pools' methods when a mock starts, but only methods that keep their own names
    guarded_async.__name__, guarded_sync.__name__ = "handle_async_request", "handle_request"

    with (
        mock.patch.object(httpcore.AsyncConnectionPool, "handle_async_request", guarded_async),
        mock.patch.object(httpcore.ConnectionPool, "handle_request", guarded_sync),
    ):
        yield


def _assert(result: checks.CheckResult) -> None:
    if not result.passed:
        raise AssertionError(f"{result.name}: {result.reason}")


def _cassette_path(request: pytest.FixtureRequest, folder: Path) -> Path:
    marker = request.node.get_closest_marker("cassette")
    if marker is not None and marker.args:
        return Path(request.node.path).parent / str(marker.args[0])
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")
    return folder / Path(request.node.path).stem / f"{name}.json"


def _declared_env(agents: Path) -> set[str]:
    """The env names the definitions' tools declare (values are never read here)."""
    from orchestrator.definitions.loader import load_definitions

    definitions = load_definitions(agents)
    return {v.name for tool in definitions.tools.values() for v in tool.variables}

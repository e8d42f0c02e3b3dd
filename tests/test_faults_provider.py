"""Provider faults: every way a model call goes wrong, served at the HTTP layer.

Each scenario drives a real runtime (SQLite file, the production stream readers
parsing provider bytes served by respx) through one fault, then checks what the thread holds
afterwards (messages, events, status) and that a later run of the same thread
works. Retries sleep on a fake clock, so they cost no time.

The scenarios are plain async functions returning an `Outcome`, so
`bench/faults.py` runs the same table and prints it.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from pydantic import BaseModel
from support import definitions

from orchestrator import Side, define_agent, define_prompt, define_tool
from orchestrator.core.messages import Message
from orchestrator.core.settings import RuntimeSettings
from orchestrator.engine.executor import ExecutionFailed, ExecutionResult
from orchestrator.runtime import Runtime, Thread
from orchestrator.storage.sqlite import SQLiteStorage
from providers.client import ModelClient
from providers.config import config_from_dict
from providers.scripted import ScriptedCall, ScriptedFault, ScriptedModel, ScriptedResponse
from providers.sse import openai_events

R = ScriptedResponse
C = ScriptedCall
F = ScriptedFault

OPENAI_KEY = "sk-test-faults-0123456789abcdefOPENAI"
ANTHROPIC_KEY = "sk-ant-test-faults-0123456789abcdefANTH"
BACKOFF = 0.5


# -- the rig: one runtime on a faulty provider ------------------------------------


class Lookup(BaseModel):
    q: str


@dataclass
class Outcome:
    fault: str
    result: str
    lost: int
    duplicate_tool_runs: int


@dataclass
class Rig:
    """A runtime whose default model is a scripted provider behind respx.

    `pre` holds answers served before the scripted model's (raw httpx
    responses, exceptions, or callables taking the request), for faults the
    scripted model cannot express.
    """

    tmp: Path
    script: list[Any]
    wire: str = "openai"
    attempts: int = 3
    timeout: float = 5.0
    pre: list[Any] = field(default_factory=list)
    make_defs: Callable[[Rig], Any] | None = None  # default: one ai_human agent "ag" with tool "lookup"
    settings: RuntimeSettings | None = None
    slept: list[float] = field(default_factory=list)
    tool_runs: list[str] = field(default_factory=list)
    runtime: Runtime | None = None

    async def __aenter__(self) -> Rig:
        self._env = {k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
        os.environ["OPENAI_API_KEY"], os.environ["ANTHROPIC_API_KEY"] = OPENAI_KEY, ANTHROPIC_KEY
        self.model = ScriptedModel(self.script, wire=self.wire)  # type: ignore[arg-type]
        self.router = respx.mock(assert_all_called=False)
        self.router.start()
        base = "https://api.openai.com/v1" if self.wire == "openai" else None
        self.route = self.model.mount(self.router, base)
        scripted = self.route.side_effect
        self.route.side_effect = lambda request: self._serve(request, scripted)
        config = config_from_dict(_config(self.attempts, self.timeout, self.wire))

        async def fake_sleep(seconds: float) -> None:
            self.slept.append(seconds)

        defs = (self.make_defs or _definitions)(self)
        self.runtime = Runtime(
            defs,
            config=config,
            storage=SQLiteStorage(str(self.tmp / "faults.db")),
            settings=self.settings or RuntimeSettings(),
            client=ModelClient(config, sleep=fake_sleep),
        )
        await self.runtime.open()
        return self

    def _serve(self, request: httpx.Request, scripted: Callable[[httpx.Request], Any]) -> Any:
        if self.pre:
            step = self.pre.pop(0)
            if isinstance(step, BaseException):
                raise step
            return step(request) if callable(step) else step
        return scripted(request)

    async def __aexit__(self, *exc: object) -> None:
        if self.runtime is not None:
            await self.runtime.close()
        self.router.stop()
        for name, value in self._env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @property
    def requests(self) -> int:
        return self.route.call_count

    async def send(self, thread: Thread, text: str) -> ExecutionResult | ExecutionFailed:
        try:
            return await thread.send(text)
        except ExecutionFailed as exc:
            return exc

    async def messages(self, thread: Thread) -> list[Message]:
        return (await thread.get_messages(include_silent=True)).messages

    async def events(self, thread: Thread) -> list[Any]:
        assert self.runtime is not None
        await self.runtime.services.bus.flush(thread.id)
        return await self.runtime.storage.events_after(thread.id, 0)


def _config(attempts: int, timeout: float, wire: str) -> dict[str, Any]:
    retry = {"attempts": attempts, "backoff": BACKOFF, "max_wait": 30}
    return {
        "providers": {"openai": {"api_key": "${OPENAI_API_KEY}"}, "anthropic": {"api_key": "${ANTHROPIC_API_KEY}"}},
        "models": {
            "gpt": {"provider": "openai", "model": "gpt-4o-mini", "retry": retry, "timeout": timeout},
            "claude": {
                "provider": "anthropic",
                "model": "claude-sonnet-4-5",
                "params": {"max_tokens": 256},
                "retry": retry,
                "timeout": timeout,
            },
        },
        "default_model": "gpt" if wire == "openai" else "claude",
    }


def _definitions(rig: Rig) -> Any:
    async def lookup(state: Any, args: Lookup) -> dict:
        rig.tool_runs.append(args.q)
        return {"status": "success", "result": f"found {args.q}"}

    prompt = define_prompt(prompt="You help.", tool_description="helper", tools=("lookup",))
    agent = define_agent(type="ai_human", side_a=Side("pa", max_steps=4))
    return definitions(
        tools={"lookup": define_tool(description="Look something up", args=Lookup, execute=lookup)},
        prompts={"pa": prompt},
        agents={"ag": agent},
    )


# -- checks shared by every scenario ------------------------------------------------


async def consistency(rig: Rig, thread: Thread) -> tuple[int, int]:
    """Invariants of a thread at rest: returns (duplicate messages, duplicate tool runs).

    Every stored message appears once (ids and seqs unique, seqs increasing),
    each has exactly one creation event, every tool call has exactly one result,
    and no event is stored twice.
    """
    messages = await rig.messages(thread)
    events = await rig.events(thread)
    seqs = [m.seq for m in messages]
    assert seqs == sorted(set(seqs)), f"message seqs not unique and increasing: {seqs}"
    assert len({m.id for m in messages}) == len(messages)
    event_seqs = [e.seq for e in events]
    assert event_seqs == sorted(set(event_seqs)), "event seqs not unique and increasing"
    created = [e.data["id"] for e in events if e.type in ("message_created", "tool_result")]
    assert sorted(created) == sorted(m.id for m in messages), "message events and stored messages differ"
    calls = [c.id for m in messages if m.role == "assistant" for c in m.tool_calls or []]
    answers = [m.tool_call_id for m in messages if m.role == "tool"]
    assert sorted(calls) == sorted(answers), f"tool calls {calls} vs results {answers}"
    texts = [(m.role, m.content) for m in messages if m.role in ("user", "assistant") and m.content]
    duplicates = len(texts) - len(set(texts))
    runs = rig.tool_runs
    return duplicates, len(runs) - len(set(runs))


async def later_run_works(rig: Rig, thread: Thread, reply: str = "later answer") -> None:
    """The same thread takes another message afterwards (the script ends with `reply`)."""
    before = len(await rig.messages(thread))
    result = await rig.send(thread, "are you there?")
    assert isinstance(result, ExecutionResult), f"the later run failed: {result}"
    assert result.output == reply
    after = await rig.messages(thread)
    assert [m.content for m in after[before:]] == ["are you there?", reply]
    assert (await thread.refresh()).status == "idle"


def _lost(expected: list[str | None], messages: list[Message]) -> int:
    stored = [m.content for m in messages]
    return sum(1 for text in expected if text not in stored)


async def recovered(
    rig: Rig, fault: str, answer: str, *, sleeps: list[float] | None = None, restarts: int | None = None
) -> Outcome:
    """The common shape: the fault is retried away and the person sees one answer."""
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionResult), f"{fault}: expected recovery, got {result}"
        assert result.output == answer
        messages = await rig.messages(thread)
        assert [(m.role, m.content) for m in messages] == [("user", "hi"), ("assistant", answer)]
        kinds = [e.type for e in await rig.events(thread)]
        assert "execution_failed" not in kinds and kinds.count("message_created") == 2
        if restarts is not None:
            assert kinds.count("stream_restarted") == restarts
        if sleeps is not None:
            assert rig.slept == sleeps
        dup, dup_runs = await consistency(rig, thread)
        lost = _lost(["hi", answer], messages)
        await later_run_works(rig, thread)
        retries = rig.requests - 2  # minus the good request and the later run's
        return Outcome(fault, f"recovered after {retries} retr{'y' if retries == 1 else 'ies'}", lost + dup, dup_runs)


async def failed_then_works(
    rig: Rig, fault: str, *, kind: str, status: int | None, requests: int, says: tuple[str, ...] = ()
) -> Outcome:
    """A fault retries cannot fix: a clear error, the person's message kept, the thread usable."""
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionFailed), f"{fault}: expected a failure, got {result}"
        cause = result.__cause__
        assert getattr(cause, "kind", None) == kind, f"{fault}: kind {getattr(cause, 'kind', None)!r}: {result}"
        assert getattr(cause, "status", None) == status
        for text in says:
            assert text in str(result), f"{fault}: {text!r} not in {result}"
        assert OPENAI_KEY not in str(result) and ANTHROPIC_KEY not in str(result)
        assert rig.requests == requests, f"{fault}: {rig.requests} requests, expected {requests}"
        messages = await rig.messages(thread)
        assert [(m.role, m.content) for m in messages] == [("user", "hi")]
        assert (await thread.refresh()).status == "failed"
        failed = [e for e in await rig.events(thread) if e.type == "execution_failed"]
        assert len(failed) == 1 and failed[0].data["status"] == status and failed[0].data["provider"]
        dup, dup_runs = await consistency(rig, thread)
        lost = _lost(["hi"], messages)
        await later_run_works(rig, thread)
        return Outcome(
            fault,
            f"failed cleanly ({kind}, HTTP {status}) after {requests} request(s); next run ok",
            lost + dup,
            dup_runs,
        )


# -- the scenarios ---------------------------------------------------------------------

Scenario = Callable[[Path], Awaitable[Outcome]]
LATER = R(text="later answer")


def _openai_fault(
    status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None
) -> httpx.Response:
    body = {
        "error": {
            "message": message,
            "type": "invalid_request_error" if status < 500 else "server_error",
            "param": None,
            "code": code,
        }
    }
    return httpx.Response(status, json=body, headers=headers or {})


def _sse(events: list[bytes]) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(events))


async def rate_limit_no_retry_after(tmp: Path) -> Outcome:
    rig = Rig(tmp, [F(429, message="Rate limit reached"), F(429), R(text="answer"), LATER])
    return await recovered(rig, "429 without Retry-After", "answer", sleeps=[BACKOFF, 2 * BACKOFF])


async def rate_limit_retry_after(tmp: Path) -> Outcome:
    rig = Rig(tmp, [F(429, headers={"retry-after": "7"}), R(text="answer"), LATER])
    return await recovered(rig, "429 with Retry-After: 7", "answer", sleeps=[7.0])


async def rate_limit_exhausted(tmp: Path) -> Outcome:
    rig = Rig(tmp, [F(429), F(429), F(429), LATER])
    return await failed_then_works(
        rig, "429 on every attempt", kind="rate_limit", status=429, requests=3, says=("openai",)
    )


def _server_error(status: int) -> Scenario:
    async def scenario(tmp: Path) -> Outcome:
        rig = Rig(tmp, [F(status, message=f"upstream said {status}"), R(text="answer"), LATER])
        return await recovered(rig, f"HTTP {status}", "answer", sleeps=[BACKOFF])

    scenario.__name__ = f"http_{status}"
    return scenario


async def server_error_exhausted(tmp: Path) -> Outcome:
    rig = Rig(tmp, [F(503), F(503), F(503), LATER])
    return await failed_then_works(rig, "503 on every attempt", kind="server", status=503, requests=3)


async def anthropic_overloaded(tmp: Path) -> Outcome:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    rig = Rig(tmp, [R(text="answer"), LATER], wire="anthropic", pre=[httpx.Response(529, json=body)])
    return await recovered(rig, "529 overloaded (anthropic)", "answer", sleeps=[BACKOFF])


async def timeout_before_first_byte(tmp: Path) -> Outcome:
    rig = Rig(tmp, [R(text="answer"), LATER], pre=[httpx.ReadTimeout("scripted: no response")])
    return await recovered(rig, "timeout before first byte (read timeout)", "answer", sleeps=[BACKOFF])


async def silent_stream_times_out(tmp: Path) -> Outcome:
    """Headers arrive, then nothing: the per-chunk timeout (0.3 s here) ends the wait."""
    rig = Rig(tmp, [R(text="never", hang_after=0), R(text="answer"), LATER], timeout=0.3)
    return await recovered(rig, "stream silent before first chunk", "answer", sleeps=[BACKOFF])


async def reset_mid_stream(tmp: Path) -> Outcome:
    rig = Rig(tmp, [R(text="a long answer cut short", chunk_size=3, cut_after=4), R(text="answer"), LATER])
    return await recovered(rig, "connection reset mid-stream", "answer", restarts=1)


async def reset_mid_tool_call(tmp: Path) -> Outcome:
    """The cut falls inside a tool call's arguments: the retried call runs once."""
    call = C("lookup", {"q": "order-1234567890"})
    rig = Rig(tmp, [R(tool_calls=[call], chunk_size=4, cut_after=5), R(tool_calls=[call]), R(text="found it"), LATER])
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionResult) and result.output == "found it"
        messages = await rig.messages(thread)
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert rig.tool_runs == ["order-1234567890"]
        assert [e.type for e in await rig.events(thread)].count("stream_restarted") == 1
        dup, dup_runs = await consistency(rig, thread)
        await later_run_works(rig, thread)
        return Outcome("connection reset inside a tool call", "recovered after 1 retry; tool ran once", dup, dup_runs)


async def stream_without_final_chunk(tmp: Path) -> Outcome:
    """The body ends cleanly but without finish_reason, usage and [DONE]: an incomplete answer."""
    truncated = openai_events("half an ans", [], model="gpt-4o-mini", usage=(1, 1))[:-3]
    rig = Rig(tmp, [R(text="answer"), LATER], pre=[_sse(truncated)])
    return await recovered(rig, "stream ends without final chunk", "answer")


async def malformed_sse_line(tmp: Path) -> Outcome:
    """A line that is not `field: value` SSE; parsers must skip it (SSE spec) and go on."""
    events = openai_events("answer", [], model="gpt-4o-mini", usage=(1, 1))
    events.insert(2, b"this line is not server-sent events\n\n")
    rig = Rig(tmp, [LATER], pre=[_sse(events)])
    return await recovered(rig, "malformed SSE line", "answer")


async def invalid_json_chunk(tmp: Path) -> Outcome:
    rig = Rig(tmp, [R(text="broken answer", malformed=True), R(text="answer"), LATER])
    return await recovered(rig, "chunk with invalid JSON", "answer")


async def _tool_error_round(tmp: Path, fault: str, call: ScriptedCall, expect: str) -> Outcome:
    rig = Rig(tmp, [R(tool_calls=[call]), R(text="sorry, fixed"), LATER])
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionResult) and result.output == "sorry, fixed"
        messages = await rig.messages(thread)
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        tool = messages[2]
        assert tool.tool_status == "error" and expect in (tool.content or ""), tool.content
        assert rig.tool_runs == []
        second = rig.model.requests[1]["messages"]  # the model read the error and answered
        assert any(m.get("role") == "tool" and expect in str(m.get("content")) for m in second)
        dup, dup_runs = await consistency(rig, thread)
        await later_run_works(rig, thread)
        return Outcome(fault, "error result to the model; it answered; tool not run", dup, dup_runs)


async def tool_args_invalid_json(tmp: Path) -> Outcome:
    return await _tool_error_round(
        tmp, "tool call with invalid JSON arguments", C("lookup", '{"q": "unterminated'), "Invalid JSON"
    )


async def tool_name_unknown(tmp: Path) -> Outcome:
    return await _tool_error_round(
        tmp, "tool call to an unknown name", C("delete_everything", {"q": "x"}), "Unknown tool 'delete_everything'"
    )


async def empty_response(tmp: Path) -> Outcome:
    """No text, no tool calls: the turn ends, nothing empty is sent back to the provider later."""
    rig = Rig(tmp, [R(text=""), LATER])
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionResult) and result.output is None
        dup, dup_runs = await consistency(rig, thread)
        await later_run_works(rig, thread)
        later = rig.model.requests[-1]["messages"]
        assert all(m.get("content") or m.get("tool_calls") for m in later), f"an empty message was sent: {later}"
        return Outcome("empty response", "turn ended with no output; next run ok", dup, dup_runs)


async def context_window_exceeded(tmp: Path) -> Outcome:
    message = (
        "This model's maximum context length is 128000 tokens. However, your messages resulted in "
        "130512 tokens. Please reduce the length of the messages."
    )
    rig = Rig(tmp, [LATER], pre=[_openai_fault(400, message, "context_length_exceeded")])
    return await failed_then_works(
        rig, "context window exceeded", kind="context_window", status=400, requests=1, says=("maximum context length",)
    )


async def authentication_failure(tmp: Path) -> Outcome:
    message = f"Incorrect API key provided: {OPENAI_KEY[:8]}...{OPENAI_KEY[-4:]}."
    rig = Rig(tmp, [LATER], pre=[_openai_fault(401, message, "invalid_api_key")])
    return await failed_then_works(
        rig, "authentication failure (401)", kind="auth", status=401, requests=1, says=("openai", "OPENAI_API_KEY")
    )


SCENARIOS: list[Scenario] = [
    rate_limit_no_retry_after,
    rate_limit_retry_after,
    rate_limit_exhausted,
    _server_error(500),
    _server_error(502),
    _server_error(503),
    server_error_exhausted,
    anthropic_overloaded,
    timeout_before_first_byte,
    silent_stream_times_out,
    reset_mid_stream,
    reset_mid_tool_call,
    stream_without_final_chunk,
    malformed_sse_line,
    invalid_json_chunk,
    tool_args_invalid_json,
    tool_name_unknown,
    empty_response,
    context_window_exceeded,
    authentication_failure,
]


KNOWN_BUGS: dict[str, str] = {}  # scenario name -> "bugs.md N" while a bug is open (marked xfail)


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(
            s,
            id=s.__name__,
            marks=[pytest.mark.xfail(reason=KNOWN_BUGS[s.__name__], strict=True)] if s.__name__ in KNOWN_BUGS else [],
        )
        for s in SCENARIOS
    ],
)
async def test_provider_fault(scenario: Scenario, tmp_path: Path) -> None:
    outcome = await scenario(tmp_path)
    assert outcome.lost == 0, outcome
    assert outcome.duplicate_tool_runs == 0, outcome


# -- a few details beyond the table -------------------------------------------------


async def test_anthropic_overloaded_body_is_what_anthropic_sends(tmp_path: Path) -> None:
    """The 529 on the anthropic wire exhausts retries into a 'server' failure naming the provider."""
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    rig = Rig(tmp_path, [LATER], wire="anthropic", pre=[httpx.Response(529, json=body) for _ in range(3)])
    outcome = await failed_then_works(
        rig, "529 every attempt", kind="server", status=529, requests=3, says=("anthropic", "Overloaded")
    )
    assert outcome.lost == 0


async def test_retry_after_is_capped_by_max_wait(tmp_path: Path) -> None:
    rig = Rig(tmp_path, [F(429, headers={"retry-after": "3600"}), R(text="answer"), LATER])
    await recovered(rig, "429 with a huge Retry-After", "answer", sleeps=[30.0])


async def test_invalid_tool_arguments_on_anthropic_wire(tmp_path: Path) -> None:
    """Anthropic streams tool input as partial JSON; broken input still becomes an error result."""
    rig = Rig(tmp_path, [R(tool_calls=[C("lookup", '{"q": ')]), R(text="ok"), LATER], wire="anthropic")
    async with rig:
        thread = await rig.runtime.create_thread("ag")  # type: ignore[union-attr]
        result = await rig.send(thread, "hi")
        assert isinstance(result, ExecutionResult) and result.output == "ok"
        tool = [m for m in await rig.messages(thread) if m.role == "tool"]
        assert len(tool) == 1 and tool[0].tool_status == "error" and rig.tool_runs == []
        await consistency(rig, thread)


async def test_dual_ai_thread_resumes_after_provider_failure(tmp_path: Path) -> None:
    """A dual_ai execution that failed mid-conversation runs again from where it was."""
    rig = Rig(tmp_path, [R(text="a1"), F(500), F(500), F(500), R(text="b1"), R(text="a2")])
    async with rig:
        prompts = {
            "pa": define_prompt(prompt="a", tool_description="a"),
            "pb": define_prompt(prompt="b", tool_description="b"),
        }
        agent = define_agent(type="dual_ai", side_a=Side("pa"), side_b=Side("pb"), max_session_turns=3)
        rig.runtime.definitions = definitions(prompts=prompts, agents={"duo": agent})  # type: ignore[union-attr]
        rig.runtime.services.definitions = rig.runtime.definitions  # type: ignore[union-attr]
        thread = await rig.runtime.create_thread("duo")  # type: ignore[union-attr]
        with pytest.raises(ExecutionFailed) as failure:
            await thread.run()
        assert failure.value.result.step_count == 1
        assert [m.content for m in await rig.messages(thread)] == ["a1"]
        result = await thread.run()
        assert [m.content for m in await rig.messages(thread)] == ["a1", "b1", "a2"]
        assert result.reason == "max_session_turns"
        await consistency(rig, thread)

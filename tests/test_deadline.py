"""The idle deadline between a stream's chunks (providers/deadline.py), on a loop whose clock the test moves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from providers.deadline import IdleDeadline


class _ClockLoop(asyncio.SelectorEventLoop):
    """Time passes only when the test says so; counts the timers armed."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.timers = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return super().call_at(when, callback, *args, **kwargs)


def _run(main: Callable[[_ClockLoop], Coroutine[Any, Any, Any]]) -> Any:
    with asyncio.Runner(loop_factory=_ClockLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, _ClockLoop)
        return runner.run(main(loop))


async def _turns(n: int = 3) -> None:
    """Let the loop run what is due (the task's own step comes before a timer due at the same moment)."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_chunks_within_the_timeout_never_expire_and_arm_a_timer_per_timeout_not_per_chunk() -> None:
    async def main(loop: _ClockLoop) -> int:
        async with IdleDeadline(1.0) as deadline:
            for _ in range(100):  # 100 chunks, 0.25 s apart: 25 s of stream, no gap near 1 s
                deadline.waiting()
                loop.now += 0.25
                await _turns()
                deadline.holding()
        return loop.timers

    timers = _run(main)
    assert timers <= 50  # one or two per second of stream; moving asyncio.timeout per chunk armed 200


def test_a_provider_silent_past_the_timeout_is_a_timeout_error() -> None:
    async def main(loop: _ClockLoop) -> None:
        async with IdleDeadline(1.0) as deadline:
            deadline.waiting()
            loop.now += 0.6
            await _turns()
            deadline.waiting()  # a chunk came: silence counts again from 0.6
            loop.now += 0.9
            await _turns()  # 0.9 s of silence: not yet
            loop.now += 0.2
            await _turns()
            pytest.fail("1.1 s of silence did not expire a 1 s deadline")

    with pytest.raises(TimeoutError):
        _run(main)


def test_the_consumer_holding_an_item_is_not_the_provider_being_slow() -> None:
    async def main(loop: _ClockLoop) -> str:
        async with IdleDeadline(1.0) as deadline:
            deadline.waiting()
            loop.now += 0.5
            await _turns()
            deadline.holding()  # e.g. a tool_call_started hook that takes 5 s
            loop.now += 5.0
            await _turns()
            deadline.waiting()
            loop.now += 0.5
            await _turns()
        return "done"

    assert _run(main) == "done"


def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    async def main(loop: _ClockLoop) -> None:
        task = asyncio.current_task()
        assert task is not None
        async with IdleDeadline(1.0) as deadline:
            deadline.waiting()
            task.cancel()  # the caller gives up (an abort), and the deadline expires too
            loop.now += 2.0
            await _turns()

    with pytest.raises(asyncio.CancelledError):
        _run(main)


def test_chunks_within_the_timeout_still_end_at_the_total() -> None:
    async def main(loop: _ClockLoop) -> int:
        chunks = 0
        async with IdleDeadline(1.0, total=5.0) as deadline:
            while chunks < 100:  # a chunk every 0.9 s: no gap times out
                deadline.waiting()
                loop.now += 0.9
                await _turns()
                deadline.holding()
                chunks += 1
        return chunks

    with pytest.raises(TimeoutError, match="more than 5 s in all"):
        _run(main)


def test_a_total_passing_while_the_consumer_holds_an_item_ends_the_answer_at_the_next_read() -> None:
    reached: list[str] = []

    async def main(loop: _ClockLoop) -> None:
        async with IdleDeadline(1.0, total=5.0) as deadline:
            deadline.waiting()
            loop.now += 0.5
            await _turns()
            deadline.holding()
            loop.now += 10.0  # the consumer's, e.g. a hook: not cancelled
            await _turns()
            reached.append("the consumer's item")
            deadline.waiting()
            await _turns()
            reached.append("a read after the total")

    with pytest.raises(TimeoutError, match="total_timeout"):
        _run(main)
    assert reached == ["the consumer's item"]


def test_a_gap_past_the_timeout_says_it_was_the_gap() -> None:
    async def main(loop: _ClockLoop) -> None:
        async with IdleDeadline(1.0, total=600.0) as deadline:
            deadline.waiting()
            loop.now += 1.5
            await _turns()

    with pytest.raises(TimeoutError, match="sent nothing for 1 s"):
        _run(main)

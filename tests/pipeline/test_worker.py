from __future__ import annotations

import asyncio
import doctest
import logging
import time

import pytest

import deltaguard.worker
from deltaguard.errors import LaneClosed, LifecycleError
from deltaguard.worker import Backoff, BoundedWorker, Leftovers, Lifecycle, Retry


class Recorder:
    """A handler that records its batches; holds each batch until `release` is set."""

    def __init__(self, hold: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = 0
        if not hold:
            self.release.set()

    async def __call__(self, batch: list[int]) -> None:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.batches.append(list(batch))


def soon(seconds: float = 5.0) -> float:
    return time.monotonic() + seconds


def test_the_module_examples_hold():
    assert doctest.testmod(deltaguard.worker).failed == 0


async def test_a_full_queue_makes_put_wait():
    handler = Recorder(hold=True)
    worker = BoundedWorker("w", handler, maxsize=2)
    worker.start()
    await worker.put(0)
    await handler.entered.wait()  # 0 is in hand; the queue holds two more
    await worker.put(1)
    await worker.put(2)
    assert worker.depth == 2
    blocked = asyncio.create_task(worker.put(3))
    await asyncio.sleep(0.05)
    assert not blocked.done()  # back-pressure: it waits, the queue does not grow
    handler.release.set()
    await asyncio.wait_for(blocked, 5)
    await asyncio.wait_for(worker.drain(), 5)
    assert [job for batch in handler.batches for job in batch] == [0, 1, 2, 3]
    assert len(await worker.aclose(soon())) == 0


async def test_the_jobs_queued_behind_the_first_are_taken_with_it_up_to_batch_size():
    handler = Recorder(hold=True)
    worker = BoundedWorker("w", handler, maxsize=16, batch_size=3)
    worker.start()
    await worker.put(0)
    await handler.entered.wait()
    for n in range(1, 6):
        await worker.put(n)
    handler.release.set()
    await asyncio.wait_for(worker.drain(), 5)
    # The first alone (nothing was queued behind it), then at most three at a time.
    assert handler.batches == [[0], [1, 2, 3], [4, 5]]
    await worker.aclose(soon())


async def test_drain_waits_for_the_work_and_keeps_the_worker_running():
    handler = Recorder()
    worker = BoundedWorker("w", handler, maxsize=8)
    worker.start()
    for n in range(5):
        await worker.put(n)
    await asyncio.wait_for(worker.drain(), 5)
    assert len(handler.batches) == 5 and worker.state is Lifecycle.RUNNING
    await worker.put(5)
    await asyncio.wait_for(worker.drain(), 5)
    assert handler.batches[-1] == [5]
    await worker.aclose(soon())


async def test_aclose_drains_before_the_deadline():
    handler = Recorder()
    worker = BoundedWorker("w", handler, maxsize=8, batch_size=4)
    worker.start()
    for n in range(6):
        await worker.put(n)
    left = await worker.aclose(soon())
    assert len(left) == 0 and worker.state is Lifecycle.CLOSED
    assert [job for batch in handler.batches for job in batch] == list(range(6))


async def test_aclose_at_the_deadline_returns_the_interrupted_batch_and_the_queued_jobs(caplog):
    handler = Recorder(hold=True)  # never released
    worker = BoundedWorker("w", handler, maxsize=8, batch_size=2)
    worker.start()
    await worker.put(0)
    await handler.entered.wait()
    for n in range(1, 4):
        await worker.put(n)
    waiting = asyncio.create_task(worker.drain())
    started = time.monotonic()
    left = await worker.aclose(time.monotonic() + 0.1)
    assert time.monotonic() - started < 2
    assert left == Leftovers(interrupted=[0], queued=[1, 2, 3]) and list(left) == [0, 1, 2, 3]
    assert worker.state is Lifecycle.CLOSED and handler.batches == []
    assert "4 jobs not done" in caplog.text
    await asyncio.wait_for(waiting, 1)  # nobody waits forever on a closed worker


async def test_aclose_stops_the_task_even_when_its_caller_is_cancelled():
    handler = Recorder(hold=True)
    worker = BoundedWorker("w", handler, maxsize=8)
    worker.start()
    await worker.put(0)
    await handler.entered.wait()
    closing = asyncio.create_task(worker.aclose(soon(60)))
    await asyncio.sleep(0.05)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert worker.state is Lifecycle.CLOSED and handler.cancelled == 1
    assert len(await worker.aclose(soon())) == 0  # a second close finds nothing


async def test_a_closing_or_closed_worker_refuses_jobs():
    worker = BoundedWorker("sink:flags", Recorder(), maxsize=2)
    with pytest.raises(LaneClosed, match="sink:flags is new"):
        await worker.put(1)
    worker.start()
    await worker.aclose(soon())
    with pytest.raises(LaneClosed, match="sink:flags is closed; 1 not accepted"):
        await worker.put(1)


def test_illegal_transitions_are_refused_with_what_happened():
    assert Lifecycle.NEW.to(Lifecycle.RUNNING, "x") is Lifecycle.RUNNING
    assert Lifecycle.NEW.to(Lifecycle.CLOSED, "x") is Lifecycle.CLOSED
    assert Lifecycle.RUNNING.to(Lifecycle.CLOSING, "x") is Lifecycle.CLOSING
    assert Lifecycle.CLOSING.to(Lifecycle.CLOSED, "x") is Lifecycle.CLOSED
    with pytest.raises(LifecycleError, match="recorder: cannot start: it is running"):
        Lifecycle.RUNNING.to(Lifecycle.RUNNING, "recorder")
    with pytest.raises(LifecycleError, match="cannot start: it is closed"):
        Lifecycle.CLOSED.to(Lifecycle.RUNNING, "recorder")
    with pytest.raises(LifecycleError, match="cannot close: it is running"):
        Lifecycle.RUNNING.to(Lifecycle.CLOSED, "recorder")
    with pytest.raises(RuntimeError):  # what callers caught before the enum existed
        Lifecycle.CLOSING.to(Lifecycle.RUNNING, "recorder")


async def test_a_worker_starts_once():
    worker = BoundedWorker("w", Recorder(), maxsize=1)
    worker.start()
    with pytest.raises(LifecycleError, match="w: cannot start: it is running"):
        worker.start()
    await worker.aclose(soon())
    with pytest.raises(LifecycleError, match="cannot start: it is closed"):
        worker.start()


def test_an_unbounded_queue_is_refused():
    with pytest.raises(ValueError, match="maxsize"):
        BoundedWorker("w", Recorder(), maxsize=0)


class Flaky:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.taken: list[list[int]] = []
        self.times: list[float] = []

    async def __call__(self, batch: list[int]) -> None:
        self.times.append(time.monotonic())
        if self.failures:
            self.failures -= 1
            raise ConnectionError("down")
        self.taken.append(list(batch))


async def test_a_failing_batch_is_retried_with_growing_waits_until_taken(caplog):
    handler = Flaky(failures=3)
    worker = BoundedWorker("w", handler, maxsize=4, retry=Retry(None, initial_s=0.02, max_s=0.04))
    worker.start()
    await worker.put(7)
    await asyncio.wait_for(worker.drain(), 5)
    assert handler.taken == [[7]] and worker.failures == 3 and worker.dropped == 0
    waits = [b - a for a, b in zip(handler.times, handler.times[1:], strict=False)]
    assert waits[0] >= 0.02 and waits[1] >= 0.04 and waits[2] >= 0.04  # doubled, then capped
    assert sum("retrying in" in r.message and r.levelno == logging.ERROR for r in caplog.records) == 3
    await worker.aclose(soon())


async def test_a_batch_is_given_up_after_its_attempts_and_the_next_one_runs(caplog):
    handler = Flaky(failures=3)
    worker = BoundedWorker("w", handler, maxsize=4, retry=Retry(3, initial_s=0.01))
    worker.start()
    await worker.put(1)
    await worker.put(2)
    await asyncio.wait_for(worker.drain(), 5)
    assert handler.taken == [[2]] and worker.failures == 3 and worker.dropped == 1
    levels = [r.levelno for r in caplog.records if r.name == "deltaguard.worker"]
    assert levels == [logging.WARNING, logging.WARNING, logging.ERROR]
    assert "giving up" in caplog.records[-1].message
    await worker.aclose(soon())


async def test_without_retry_a_failing_job_is_logged_and_dropped_once():
    handler = Flaky(failures=1)
    worker = BoundedWorker("w", handler, maxsize=4)
    worker.start()
    await worker.put(1)
    await worker.put(2)
    await asyncio.wait_for(worker.drain(), 5)
    assert handler.taken == [[2]] and worker.dropped == 1 and len(handler.times) == 2
    await worker.aclose(soon())


async def test_cancelled_error_is_re_raised_not_retried():
    calls = 0

    async def cancelled(batch: list[int]) -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    worker = BoundedWorker("w", cancelled, maxsize=4, retry=Retry(None, initial_s=0.01))
    worker.start()
    await worker.put(1)
    await worker.put(2)
    await asyncio.sleep(0.1)
    # Not a failure: neither retried nor dropped, and the worker took nothing more.
    assert calls == 1 and worker.failures == 0 and worker.dropped == 0 and worker.depth == 1
    left = await worker.aclose(soon(0.1))
    assert left == Leftovers(interrupted=[1], queued=[2])


async def test_a_wait_between_attempts_is_cancelled_by_aclose():
    handler = Flaky(failures=10**6)
    worker = BoundedWorker("w", handler, maxsize=4, retry=Retry(None, initial_s=30.0, max_s=30.0))
    worker.start()
    await worker.put(1)
    await asyncio.sleep(0.05)
    started = time.monotonic()
    left = await worker.aclose(time.monotonic() + 0.05)
    assert time.monotonic() - started < 2 and left.interrupted == [1]


def test_backoff_doubles_up_to_its_cap_and_resets():
    backoff = Backoff(0.1, 0.3)
    assert [backoff.next_delay() for _ in range(4)] == [0.1, 0.2, 0.3, 0.3]
    backoff.reset()
    assert backoff.next_delay() == 0.1
    assert Retry(2, 0.5, 1.0).backoff().next_delay() == 0.5

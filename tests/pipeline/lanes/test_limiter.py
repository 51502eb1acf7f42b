"""The classifier thread pool, shared fairly: a tenant's cap, and free threads to the
tenant that used the least."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import pytest

from deltaguard.lanes.limiter import InferenceLimiter
from tests.support.toy import ItemCounter


def work(seconds: float, log: list[str], name: str) -> str:
    time.sleep(seconds)
    log.append(name)
    return name


async def test_a_tenant_flooding_the_pool_leaves_a_thread_for_another():
    limiter = InferenceLimiter(threads=2, per_tenant=1)
    log: list[str] = []
    try:
        hog = [asyncio.create_task(limiter.run(work, 0.4, log, f"hog{i}", tenant="hog")) for i in range(6)]
        await asyncio.sleep(0.05)
        t0 = time.perf_counter()
        assert await limiter.run(work, 0.0, log, "small", tenant="small") == "small"
        waited = time.perf_counter() - t0
        assert waited < 0.3, waited  # not behind the hog's queue (6 x 0.4 s on one thread)
        assert limiter.waiting() == {"hog": 5}
        for task in hog:
            task.cancel()
        await asyncio.gather(*hog, return_exceptions=True)
        assert limiter.waiting() == {}
    finally:
        limiter.close()


async def test_free_threads_go_to_the_tenant_that_used_the_least():
    limiter = InferenceLimiter(threads=1)
    log: list[str] = []
    try:
        a = [asyncio.create_task(limiter.run(work, 0.05, log, f"a{i}", tenant="a")) for i in range(4)]
        await asyncio.sleep(0.01)  # a0 runs; a1..a3 wait
        b = [asyncio.create_task(limiter.run(work, 0.05, log, f"b{i}", tenant="b")) for i in range(3)]
        await asyncio.gather(*a, *b)
        # FIFO would run a0..a3 first; here b0 follows a0 and the two take turns (equal
        # jobs: ties between equal thread times may go either way).
        assert log[:2] == ["a0", "b0"] and log.index("b2") < log.index("a3"), log
    finally:
        limiter.close()


async def test_a_cancelled_job_hands_its_thread_on():
    limiter = InferenceLimiter(threads=1)
    log: list[str] = []
    try:
        first = asyncio.create_task(limiter.run(work, 0.1, log, "first", tenant="a"))
        await asyncio.sleep(0.01)
        gone = asyncio.create_task(limiter.run(work, 0.0, log, "gone", tenant="b"))
        await asyncio.sleep(0.01)
        gone.cancel()
        assert await limiter.run(work, 0.0, log, "next", tenant="c") == "next"
        await first
        assert log == ["first", "next"] and limiter.waiting() == {}
    finally:
        limiter.close()


async def test_the_stage_keeps_a_thread_for_another_tenant_while_one_floods(scorer):
    from deltaguard.lanes.stage import SafetyStage, StageConfig
    from deltaguard.parsing import parse_item

    def user(text: str):
        return parse_item({"role": "user", "content": text})

    big = " ".join(f"word{i} lorem ipsum dolor sit amet" for i in range(40_000))  # ~1 MB
    stage = SafetyStage(scorer, config=StageConfig(inference_threads=2, tenant_threads=1))
    await stage.start()
    try:

        async def turn(tenant: str, n: int, text: str) -> float:
            t0 = time.perf_counter()
            await stage.begin(tenant, history=[user(f"{n} {text}")], response_id=f"{tenant}-{n}")
            return time.perf_counter() - t0

        await turn("small", -1, "warm up")
        flood = [asyncio.create_task(turn("hog", n, big)) for n in range(6)]
        await asyncio.sleep(0.2)
        small = [await turn("small", n, "a small question") for n in range(3)]
        hog = await asyncio.gather(*flood)
    finally:
        await stage.aclose()
    assert max(small) < max(hog) / 8, (small, hog)  # uncapped, a small turn waits for a fold


async def test_a_heavier_tenant_gets_its_weight_of_thread_time():
    limiter = InferenceLimiter(threads=1, weights={"a": 3.0})
    log: list[str] = []
    try:
        first = asyncio.create_task(limiter.run(work, 0.02, log, "first", tenant="a"))
        await asyncio.sleep(0.005)  # runs; the others queue behind it
        jobs = [
            asyncio.create_task(limiter.run(work, 0.02, log, f"{t}{i}", tenant=t))
            for i in range(12)
            for t in ("a", "b")
        ]
        await asyncio.gather(first, *jobs)
        # While both wait, "a" is granted about three jobs for each of "b"'s (equal jobs;
        # unweighted, it would be one for one: 6 of 12).
        granted = sum(name.startswith("a") for name in log[1:13])
        assert 8 <= granted <= 10, log
    finally:
        limiter.close()


def test_tenant_weights_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        InferenceLimiter(threads=1, weights={"a": 0.0})


def _priority() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="threads have priorities of their own on Linux"
)
async def test_a_niced_pool_runs_its_jobs_below_the_request_paths_priority():
    base = _priority()
    plain, niced = InferenceLimiter(threads=1), InferenceLimiter(threads=1, nice=5, name="background")
    try:
        assert await plain.run(_priority) == base
        assert await niced.run(_priority) == min(19, base + 5)
        assert _priority() == base  # the event loop's thread keeps its own
    finally:
        plain.close()
        niced.close()
    with pytest.raises(ValueError, match="nice must be 0 or more"):
        InferenceLimiter(threads=1, nice=-1)


class ThreadNoter(ItemCounter):
    """Notes the name and OS priority of each thread it scores on."""

    def __init__(self, name: str, lane: str) -> None:
        super().__init__(name, lane)
        self.threads: set[tuple[str, int]] = set()

    def update(self, state, items):
        self.threads.add((threading.current_thread().name.rsplit("_", 1)[0], _priority()))
        return super().update(state, items)


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="threads have priorities of their own on Linux"
)
async def test_the_gate_runs_on_the_request_paths_pool_and_the_monitor_and_output_lanes_below_it():
    from deltaguard.lanes.stage import SafetyStage, StageConfig, Usage
    from deltaguard.parsing import parse_item
    from deltaguard.state.scoring import Scorer

    gate, monitor = ThreadNoter("gate_probe", "gate"), ThreadNoter("monitor_probe", "monitor")
    stage = SafetyStage(Scorer([gate, monitor]), config=StageConfig(background_nice=7))
    await stage.start()
    try:
        turn = await stage.begin("t", new_items=[parse_item({"role": "user", "content": "hi"})])
        gate_threads = set(gate.threads)
        output = parse_item({"type": "message", "role": "assistant", "content": "hello"})
        await turn.finish([output], Usage(3, 0, 1))
        await stage.drain(10)
    finally:
        await stage.aclose()
    base = _priority()
    assert gate_threads == {("deltaguard-infer", base)}
    assert gate.threads - gate_threads == {("deltaguard-background", min(19, base + 7))}  # output scoring
    assert monitor.threads == {("deltaguard-background", min(19, base + 7))}

"""The monitor lane's waves across tenants: each tenant's turns folded as its own work."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

from deltaguard.lanes.pending_verdicts import VerdictWait
from deltaguard.lanes.stage import SafetyStage, StageConfig
from deltaguard.parsing import parse_item
from deltaguard.sinks import MemorySink
from deltaguard.state.scoring import Scorer
from tests.support.toy import BatchingCounter


def user(text):
    return parse_item({"role": "user", "content": text})


async def test_a_wave_of_two_tenants_turns_is_folded_once_per_tenant_each_as_its_own_work():
    config = dataclasses.replace(StageConfig(tenant_threads=1), verdict_wait=VerdictWait(deadline_s=0))
    hold = threading.Event()
    clf = BatchingCounter(hold=hold)
    flags = MemorySink()
    stage = SafetyStage(Scorer([clf]), flag_sink=flags, billing_sink=MemorySink(), config=config)
    await stage.start()
    try:
        ran: list[str] = []
        run = stage._lanes.monitor.run

        async def noted(fn, *args, tenant=""):
            ran.append(tenant)
            return await run(fn, *args, tenant=tenant)

        stage._lanes.monitor.run = noted
        await stage.check_turn("h1", [user("first")], tenant="hog")
        assert await asyncio.to_thread(clf.entered.wait, 5)  # the lane holds; the queue fills
        for n in range(3):
            await stage.check_turn(f"h{n + 2}", [user(f"hog {n} BOOM")], tenant="hog")
        await stage.check_turn("s1", [user("a small BOOM")], tenant="small")
        hold.set()
        await stage.drain(10)
    finally:
        await stage.aclose()
    # One wave (distinct conversations), folded as two jobs: hog's three turns as hog's
    # work, small's one as small's, not all four as the work of the tenant with most.
    assert ran == ["hog", "hog", "small"]
    assert clf.batches == [3]  # small's single turn folds alone (`update`)
    assert sorted(e.response_id for e in flags.events) == ["h2", "h3", "h4", "s1"]

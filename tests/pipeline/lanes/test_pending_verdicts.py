"""PendingVerdicts: a conversation's next turn waits for the monitor verdicts still to come,
in the process and, through a real redis-server, on every replica; bounded by its deadline."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from deltaguard.errors import MonitorVerdictPending
from deltaguard.gateway.error_exits import client_error
from deltaguard.lanes.pending_verdicts import PendingVerdicts, VerdictWait
from deltaguard.lanes.stage import SafetyStage, StageConfig
from deltaguard.parsing import parse_item
from deltaguard.sinks import MemorySink
from deltaguard.state.scoring import Scorer
from tests.support.toy import BatchingCounter


@pytest.fixture()
def replicas(redis_pair):
    """Two replicas' pending verdicts on one freshly emptied Redis."""
    made = []
    for backend in redis_pair:
        verdicts = PendingVerdicts(VerdictWait(deadline_s=2.0), backend)
        verdicts.judged = True
        made.append(verdicts)
    return made


async def _wait_while(verdicts: PendingVerdicts, done_after_s: float, finish) -> float:
    """Seconds `verdicts.wait` took while `finish` ran `done_after_s` into it."""

    async def later():
        await asyncio.sleep(0)  # the wait starts its clock first, so it waits done_after_s or more
        await asyncio.sleep(done_after_s)
        finish()

    start = time.monotonic()
    _, waited = await asyncio.gather(later(), verdicts.wait("t", "c"))
    assert waited <= time.monotonic() - start  # what it reports is what the caller waited
    return waited


async def test_a_turn_on_another_replica_waits_for_the_verdict_pending_there(replicas):
    one, two = replicas
    one.note("t", "c", "r1")
    waited = await _wait_while(two, 0.3, lambda: one.done("t", "c", "r1"))
    assert 0.3 <= waited < 2.0  # woken by the verdict landing, not by the deadline
    assert (two.waited, two.late) == (1, 0) and two.wait_s >= 0.3
    for tenant, conversation in (("t", "c"), ("t", "other"), ("u", "c")):  # nothing pending: no wait
        await two.wait(tenant, conversation)
    assert (two.waited, two.late) == (1, 0)


async def test_the_replica_that_judges_wakes_its_own_turns_at_once(replicas):
    one, _ = replicas
    one.note("t", "c", "r1")
    waited = await _wait_while(one, 0.2, lambda: one.done("t", "c", "r1"))
    assert 0.2 <= waited < 2.0 and (one.waited, one.late) == (1, 0)


async def test_a_late_verdict_lets_the_turn_proceed_counted_and_a_dead_replicas_entry_lapses(replicas):
    one, two = replicas
    two.policy = VerdictWait(deadline_s=0.3)
    one.policy = VerdictWait(deadline_s=0.3)
    noted = time.monotonic()
    one.note("t", "c", "r1")  # ... and the replica dies before its verdict
    waited = await two.wait("t", "c")
    # The entry's deadline runs from the note, a moment before this wait began: the turn
    # went on once it passed, not 0.3 s after the wait started.
    assert time.monotonic() - noted >= 0.3 and waited > 0 and two.late == 1
    # Its entry named its deadline: no turn waits for it again, each goes on without it,
    # however long this turn's own deadline.
    two.policy = VerdictWait(deadline_s=10.0)
    assert await two.wait("t", "c") < 5.0 and two.late == 2


async def test_the_refuse_policy_refuses_a_turn_whose_verdict_is_late(replicas):
    one, two = replicas
    two.policy = VerdictWait(deadline_s=0.2, late="refuse")
    one.note("t", "c", "r1")
    with pytest.raises(MonitorVerdictPending) as refused:
        await two.wait("t", "c")
    told = client_error(refused.value)  # what the gateway answers
    assert told.status == 503 and told.code == "monitor_verdict_pending" and told.type == "server_error"


async def test_an_output_pending_holds_only_the_other_replicas_monitor_lane(replicas):
    one, two = replicas
    one.note("t", "c", "r1", output=True)
    await two.wait("t", "c")  # the gate: an output raises no flag, so it waits for none
    assert (two.waited, two.late) == (0, 0)

    async def later():
        await asyncio.sleep(0.2)
        one.done("t", "c", "r1", output=True)

    start = time.monotonic()
    await asyncio.gather(later(), two.outputs_in("t", "c"))
    assert time.monotonic() - start >= 0.2
    one.note("t", "c", "r2", output=True)
    one.policy = VerdictWait(deadline_s=10.0)
    start = time.monotonic()
    await one.outputs_in("t", "c")  # its own: the lane takes its jobs in order
    assert time.monotonic() - start < 5.0  # not held until the deadline


async def test_nothing_is_waited_for_without_a_queued_monitor_lane_or_with_no_deadline():
    verdicts = PendingVerdicts(VerdictWait(deadline_s=5.0))
    verdicts.note("t", "c", "r1")  # no lane notes here: nothing noted
    assert await verdicts.wait("t", "c") == 0.0
    verdicts = PendingVerdicts(VerdictWait(deadline_s=0))
    verdicts.judged = True
    verdicts.note("t", "c", "r1")
    assert await verdicts.wait("t", "c") == 0.0


def test_a_wait_setting_that_cannot_work_is_refused():
    with pytest.raises(ValueError, match="deadline_s"):
        VerdictWait(deadline_s=-1)
    with pytest.raises(ValueError, match="late"):
        VerdictWait(late="ignore")  # type: ignore[arg-type]


def user(text):
    return parse_item({"role": "user", "content": text})


async def test_a_stage_continuation_waits_for_the_monitor_verdict_and_is_blocked_by_it():
    """One process: the monitor lane is held on the first turn's verdict (a flag); the
    continuation is gated only once it is in, and is blocked by it."""
    hold = threading.Event()
    clf = BatchingCounter(hold=hold)  # the monitor lane flags `secrets` on BOOM
    config = StageConfig(verdict_wait=VerdictWait(deadline_s=10.0))  # the wait is off by default
    stage = SafetyStage(Scorer([clf]), flag_sink=MemorySink(), billing_sink=MemorySink(), config=config)
    await stage.start()
    try:
        await stage.check_turn("a1", [user("BOOM")])
        assert await asyncio.to_thread(clf.entered.wait, 5)
        asyncio.get_running_loop().call_later(0.3, hold.set)
        start = time.monotonic()
        gate = await stage.check_turn("a2", [user("and then?")], "a1")
        assert time.monotonic() - start >= 0.25
        assert gate.blocked and gate.blocked_categories == ["secrets"]
        assert stage.lockout.verdicts.waited == 1 and stage.lockout.verdicts.late == 0
    finally:
        hold.set()
        await stage.aclose()


async def test_pending_says_what_wait_would_wait_for_here_and_on_the_other_replica(replicas):
    """The gate's job asks `pending` on a pool thread before it reads the flags: a verdict
    noted here or on another replica is pending until done; an output job is not."""
    one, two = replicas
    assert not one.pending("acme", "conv_1") and not two.pending("acme", "conv_1")
    one.note("acme", "conv_1", "resp_1", output=True)
    assert not one.pending("acme", "conv_1") and not two.pending("acme", "conv_1")
    one.note("acme", "conv_1", "resp_2")
    assert await asyncio.to_thread(one.pending, "acme", "conv_1")
    assert await asyncio.to_thread(two.pending, "acme", "conv_1")
    assert not two.pending("acme", "conv_2")
    one.done("acme", "conv_1", "resp_2")
    assert not one.pending("acme", "conv_1") and not two.pending("acme", "conv_1")


def test_nothing_is_pending_without_a_queued_monitor_lane_or_a_wait():
    verdicts = PendingVerdicts(VerdictWait(deadline_s=2.0))
    verdicts.note("acme", "conv_1", "resp_1")  # no lane notes here: nothing kept
    assert not verdicts.pending("acme", "conv_1")
    verdicts.judged = True
    verdicts.note("acme", "conv_1", "resp_1")
    assert verdicts.pending("acme", "conv_1")
    off = PendingVerdicts(VerdictWait(deadline_s=0.0))
    off.judged = True
    off.note("acme", "conv_1", "resp_1")
    assert not off.pending("acme", "conv_1")

"""`AwaitedVerdicts`: a held turn's verdict, settled by the worker's event or by the deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from deltaguard.events import VerdictEvent
from deltaguard.lanes.awaited_verdicts import UNJUDGED_CATEGORY, AwaitedVerdicts, verdict_of
from deltaguard.state.scoring import TurnVerdict


def verdict(decision: str, *categories: str) -> TurnVerdict:
    return TurnVerdict(decision, {c: 0.9 for c in categories}, list(categories), {}, 0, [])


async def test_a_verdict_settles_its_turn_only():
    verdicts = AwaitedVerdicts(5.0)
    a = verdicts.expect("acme", "resp_1")
    b = verdicts.expect("acme", "resp_2")
    assert verdicts.settle("acme", "resp_1", verdict("block", "prompt_injection"))
    assert (await a).flagged_categories == ["prompt_injection"]
    assert not b.done() and verdicts.pending == 1
    # Another tenant's turn of the same id, and a turn settled already, are not this one.
    assert not verdicts.settle("other", "resp_2", verdict("allow"))
    assert not verdicts.settle("acme", "resp_1", verdict("allow"))
    assert verdicts.settled == 1 and not b.done()


async def test_past_the_deadline_release_settles_with_no_verdict():
    verdicts = AwaitedVerdicts(0.2, "release")
    start = time.monotonic()
    assert await verdicts.expect("acme", "resp_1") is None
    assert 0.2 <= time.monotonic() - start < 1.0
    assert (verdicts.expired, verdicts.pending) == (1, 0)
    assert not verdicts.settle("acme", "resp_1", verdict("allow"))  # too late: dropped


async def test_past_the_deadline_block_refuses_as_an_injection():
    verdicts = AwaitedVerdicts(0.1, "block")
    settled = await verdicts.expect("acme", "resp_1")
    assert settled is not None and settled.decision == "block"
    assert settled.flagged_categories == [UNJUDGED_CATEGORY]


@pytest.mark.parametrize(("fallback", "blocked"), [("release", False), ("block", True)])
async def test_a_turn_the_worker_failed_on_gets_the_fallback_at_once(fallback, blocked):
    verdicts = AwaitedVerdicts(30.0, fallback)
    future = verdicts.expect("acme", "resp_1")
    assert verdicts.settle("acme", "resp_1", None)
    settled = future.result()  # at once, not at the deadline
    assert (settled is not None and settled.decision == "block") is blocked
    assert verdicts.failed == 1


async def test_discard_forgets_a_turn_never_published():
    verdicts = AwaitedVerdicts(0.1, "block")
    future = verdicts.expect("acme", "resp_1")
    verdicts.discard("acme", "resp_1")
    assert verdicts.pending == 0
    assert future.result().flagged_categories == [UNJUDGED_CATEGORY]  # no verdict will come
    await asyncio.sleep(0.2)
    assert verdicts.expired == 0  # its deadline went with it


async def test_a_turn_published_again_shares_its_verdict():
    verdicts = AwaitedVerdicts(1.0)
    first = verdicts.expect("acme", "resp_1")
    assert verdicts.expect("acme", "resp_1") is first and verdicts.pending == 1
    verdicts.settle("acme", "resp_1", verdict("allow"))
    assert first.result().decision == "allow"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="positive"):
        AwaitedVerdicts(0.0)
    with pytest.raises(ValueError, match="'release' or 'block'"):
        AwaitedVerdicts(1.0, "allow")  # type: ignore[arg-type]


def test_verdict_of_an_event():
    event = VerdictEvent.build(
        conversation_id="c",
        response_id="r",
        decision="block",
        turn_event_id="turn_x",
        categories=["prompt_injection"],
        scores={"prompt_injection": 0.98},
    )
    got = verdict_of(event)
    assert got is not None and (got.decision, got.flagged_categories) == ("block", ["prompt_injection"])
    failed = VerdictEvent.build(
        conversation_id="c", response_id="r", decision="error", turn_event_id="turn_x", error="scoring_failed"
    )
    assert verdict_of(failed) is None
    assert failed.event_id != event.event_id  # a later verdict of the same turn is not a duplicate

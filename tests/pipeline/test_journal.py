"""deltaguard.journal: billing kept on disk until its sink has it."""

from __future__ import annotations

import pytest

from deltaguard.events import BillingEvent, stable_event_id
from deltaguard.journal import BillingJournal, JournalCadence
from deltaguard.lanes.stage import SafetyStage, StageConfig
from deltaguard.parsing import parse_item
from deltaguard.sinks import MemorySink
from deltaguard.state.scoring import Scorer
from deltaguard.usage import Usage
from tests.support.toy import ItemCounter


def bill(response_id: str, output_tokens: int = 0) -> BillingEvent:
    return BillingEvent.build(
        conversation_id="c1",
        response_id=response_id,
        input_tokens=10,
        cached_input_tokens=0,
        output_tokens=output_tokens,
        classifier_ms=0.0,
    )


def test_recovery_gives_what_was_owed_and_not_confirmed_the_newest_version_of_each(tmp_path):
    journal = BillingJournal(tmp_path / "billing.journal")
    assert journal.recover() == []
    journal.note(bill("r1"))  # a generation starts
    journal.note(bill("r2"))
    journal.note(bill("r1", output_tokens=7))  # r1 completes
    journal.note(bill("r3", output_tokens=3))
    journal.done([bill("r3", output_tokens=3)])  # the sink took r3
    with open(journal.path, "a", encoding="utf-8") as f:
        f.write('{"bill": {"kind": "bil')  # killed in the middle of a write
    # no close(): the process was killed
    again = BillingJournal(journal.path)
    owed = again.recover()
    assert [(e.response_id, e.output_tokens) for e in owed] == [("r2", 0), ("r1", 7)]
    assert len(journal.path.read_text().splitlines()) == 2  # rewritten to what is still owed
    again.done(owed)
    again.close()
    assert BillingJournal(journal.path).recover() == []


def user(text):
    return parse_item({"role": "user", "content": text})


async def test_a_stage_killed_mid_generation_bills_it_at_its_next_start(tmp_path):
    config = StageConfig(billing_journal=tmp_path / "billing.journal")
    first_sink = MemorySink()
    first = SafetyStage(Scorer([ItemCounter()]), billing_sink=first_sink, config=config)
    await first.start()
    done = await first.begin("default", new_items=[user("fix the failing test")], response_id="r1")
    done.generating()
    await done.finish([parse_item({"role": "assistant", "content": "done"})], Usage(5, 0, 2))
    await first.drain(5)
    assert [e.response_id for e in first_sink.events] == ["r1"]
    cut = await first.begin(
        "default", new_items=[user("and the docs")], previous_response_id="r1", response_id="r2"
    )
    cut.generating()  # ... and the process is killed while the model answers: no finish, no aclose
    second_sink = MemorySink()
    second = SafetyStage(Scorer([ItemCounter()]), billing_sink=second_sink, config=config)
    await second.start()
    await second.aclose()
    [owed] = second_sink.events
    assert (owed.response_id, owed.kind, owed.output_tokens) == ("r2", "billing", 0)
    assert owed.input_tokens == sum(i.tokens for i in cut.history) > 0
    assert owed.event_id == stable_event_id("billing", "r2")  # the id the completed bill would have had


def test_the_file_is_rewritten_to_what_is_owed_when_it_outgrows_its_bound(tmp_path):
    journal = BillingJournal(tmp_path / "billing.journal", compact_bytes=4096)
    journal.recover()
    for i in range(200):  # each response owed at its start, billed, then taken by the sink
        journal.note(bill(f"r{i}"))
        journal.note(bill(f"r{i}", output_tokens=5))
        if i != 150:
            journal.done([bill(f"r{i}", output_tokens=5)])
    assert journal.path.stat().st_size <= 4096 + 1024
    journal.close()
    assert [e.response_id for e in BillingJournal(journal.path).recover()] == ["r150"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_meter_journals_the_streamed_output_every_n_tokens_or_t_seconds_never_per_token(tmp_path):
    journal = BillingJournal(
        tmp_path / "billing.journal", cadence=JournalCadence(every_tokens=10, every_s=1.0)
    )
    journal.recover()
    clock = Clock()
    meter = journal.meter(bill("r1"), clock)
    lines = lambda: len(journal.path.read_text().splitlines())  # noqa: E731
    assert lines() == 1  # the provisional event: its input
    for _ in range(25):  # one token a piece, no time passing: a write per 10 tokens
        meter.streamed(" word")
    assert lines() == 3 and meter.tokens == 25
    clock.now += 1.5  # the interval passed: the next piece writes whatever is new
    meter.streamed(" more")
    assert lines() == 4
    clock.now += 5  # nothing new streamed: nothing written
    meter.streamed("")
    assert lines() == 4
    [owed] = BillingJournal(journal.path).recover()  # killed here
    assert (owed.input_tokens, owed.output_tokens) == (10, 26)


def test_the_completed_bill_ends_the_meter(tmp_path):
    journal = BillingJournal(tmp_path / "billing.journal", cadence=JournalCadence(every_tokens=1))
    journal.recover()
    meter = journal.meter(bill("r1"))
    meter.streamed("one two")
    journal.note(bill("r1", output_tokens=3))  # the model's usage, as it reported it
    meter.streamed("three four five")  # a piece still in flight: never overwrites it
    [owed] = BillingJournal(journal.path).recover()
    assert owed.output_tokens == 3


def test_a_cadence_that_would_write_per_nothing_is_refused():
    with pytest.raises(ValueError, match="every_tokens"):
        JournalCadence(every_tokens=0)
    with pytest.raises(ValueError, match="every_s"):
        JournalCadence(every_s=0)

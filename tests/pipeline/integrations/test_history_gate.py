"""HistoryGate: full-history clients get delta-only scoring, conversations and lanes."""

from __future__ import annotations

import pytest

from deltaguard.chat_items import chat_history_items, chat_output_items
from deltaguard.classifiers.base import count_tokens
from deltaguard.errors import PreviousResponseNotFound
from deltaguard.events import BillingEvent, FlagEvent
from deltaguard.integrations.history_gate import HistoryGate
from deltaguard.lanes.stage import StageConfig, Usage
from deltaguard.sinks import MemorySink
from deltaguard.state.scoring import Scorer
from tests.support.toy import ItemCounter

USAGE = Usage(10, 0, 5)


class RudeWatcher(ItemCounter):
    """A monitor-lane classifier: `toxicity` once it has seen 'RUDE'."""

    categories = ("toxicity",)

    def update(self, state, items):
        upd = super().update(
            state,
            [
                type(i)(i.kind, i.role, i.text.replace("RUDE", "BOOM"), i.digest, i.raw, i.tokens)
                for i in items
            ],
        )
        rows = [{"toxicity": r["secrets"]} for r in upd.item_scores]
        return type(upd)(upd.state, rows, {"toxicity": upd.scores.get("secrets", 0.0)}, upd.tokens)


async def started(monitor=False, **config):
    classifiers = [ItemCounter()]
    if monitor:
        classifiers.append(RudeWatcher("watch", "monitor"))
    flags, billing = MemorySink(), MemorySink()
    gate = HistoryGate(
        Scorer(classifiers),
        monitor=("watch",) if monitor else (),
        flag_sink=flags,
        billing_sink=billing,
        config=StageConfig(**config),
    )
    await gate.start()
    return gate, flags, billing


async def chat_turn(gate, messages, answer, tenant="default"):
    turn = await gate.check(chat_history_items(messages), tenant)
    if not turn.blocked:
        reply = {"role": "assistant", "content": answer}
        await gate.complete(turn, chat_output_items(reply), USAGE)
        await gate.drain()  # the post lane has folded the answer
        messages.append(reply)
    return turn


async def test_resent_history_is_scored_delta_only_and_keeps_its_conversation():
    gate, _, billing = await started()
    messages = [{"role": "system", "content": "You are terse."}]
    turns = []
    for k in range(8):
        messages.append({"role": "user", "content": f"question number {k} about the weather"})
        turns.append(await chat_turn(gate, messages, f"answer {k} " + "sunny " * 20))
    new_tokens = [count_tokens(f"question number {k} about the weather") for k in range(8)]
    # Turn 0 scores system + user; later turns only their new user message: the echoed
    # answer was folded by the post lane, and the resent prefix is recognised.
    assert turns[0].gate.verdict.tokens_scored == count_tokens("You are terse.") + new_tokens[0]
    assert [t.gate.verdict.tokens_scored for t in turns[1:]] == new_tokens[1:]
    assert len({t.conversation_id for t in turns}) == 1
    assert len({t.response_id for t in turns}) == 8
    await gate.aclose()
    assert [e.conversation_id for e in billing.events] == [turns[0].conversation_id] * 8
    assert all(isinstance(e, BillingEvent) for e in billing.events)


async def test_two_conversations_and_two_tenants_stay_apart():
    gate, _, _ = await started()
    a = await chat_turn(gate, [{"role": "user", "content": "hello"}], "hi")
    b = await chat_turn(gate, [{"role": "user", "content": "something else"}], "ok")
    c = await chat_turn(gate, [{"role": "user", "content": "hello"}], "hi", tenant="other")
    assert a.conversation_id != b.conversation_id
    assert c.gate.verdict.tokens_scored == 1  # another tenant's store: nothing reused
    await gate.aclose()


async def test_a_fork_of_the_history_is_scored_from_the_shared_prefix():
    gate, _, _ = await started()
    base = [{"role": "user", "content": "one two three"}]
    first = await chat_turn(gate, list(base), "four")
    fork = await chat_turn(
        gate, [*base, {"role": "assistant", "content": "four"}, {"role": "user", "content": "x"}], "y"
    )
    assert fork.gate.verdict.tokens_scored == 1 and fork.conversation_id == first.conversation_id
    edited = await chat_turn(
        gate, [{"role": "user", "content": "one two THREE"}, {"role": "user", "content": "x"}], "y"
    )
    assert edited.gate.verdict.tokens_scored == 4  # an edited first message: nothing to reuse
    await gate.aclose()


async def test_gate_blocks_and_flags():
    gate, flags, billing = await started()
    messages = [{"role": "user", "content": "fine"}]
    await chat_turn(gate, messages, "ok")
    messages.append({"role": "user", "content": "BOOM"})
    turn = await chat_turn(gate, messages, "never")
    assert turn.blocked and turn.gate.blocked_categories == ["secrets"]
    await gate.aclose()
    (flag,) = flags.events
    assert isinstance(flag, FlagEvent) and flag.lane == "gate" and flag.decision == "block"
    assert len(billing.events) == 1  # the blocked turn never reached the model


async def test_monitor_lane_flags_and_the_gate_enforces_it_next_turn():
    gate, flags, _ = await started(monitor=True)
    gate.stage.policy.categories["toxicity"].action = "block"
    messages = [{"role": "user", "content": "hello"}]
    turn = await gate.check(chat_history_items(messages))
    assert not turn.blocked  # the counter that sees BOOM is not in the gate lane
    verdict = await gate.monitor(turn)
    assert verdict is not None and verdict.decision == "allow"
    messages += [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "RUDE"}]
    turn = await gate.check(chat_history_items(messages))
    assert turn.gate.verdict.flagged_categories == [] and not turn.blocked
    verdict = await gate.monitor(turn)
    assert verdict.decision == "block" and gate.blocking(verdict.flagged_categories) == ["toxicity"]
    assert verdict.tokens_scored == 2  # "hi" and "RUDE": the monitor is delta-only too
    messages.append({"role": "user", "content": "and now?"})
    nxt = await gate.check(chat_history_items(messages))
    assert nxt.blocked and nxt.gate.blocked_categories == ["toxicity"]
    await gate.aclose()
    assert [e.lane for e in flags.events] == ["monitor"]


async def test_monitor_is_a_no_op_without_monitor_classifiers():
    gate, _, _ = await started()
    turn = await gate.check(chat_history_items([{"role": "user", "content": "hi"}]))
    assert await gate.monitor(turn) is None
    await gate.aclose()


async def test_responses_continuations_by_upstream_id():
    gate, _, _ = await started()
    turn = await gate.check(chat_history_items([{"role": "user", "content": "a b c"}]))
    await gate.complete(turn, chat_output_items({"content": "d e"}), USAGE, upstream_response_id="resp_up_1")
    await gate.drain()
    nxt = await gate.check_continuation("resp_up_1", chat_history_items([{"role": "user", "content": "f"}]))
    assert nxt.gate.verdict.tokens_scored == 1
    assert nxt.conversation_id == turn.conversation_id
    assert [i.text for i in nxt.history] == ["a b c", "d e", "f"]
    with pytest.raises(PreviousResponseNotFound):
        await gate.check_continuation("resp_unknown", [])
    with pytest.raises(PreviousResponseNotFound):
        await gate.check_continuation("resp_up_1", [], tenant="other")
    await gate.aclose()


async def test_unknown_monitor_classifier_is_refused():
    with pytest.raises(ValueError, match="unknown classifiers"):
        HistoryGate(Scorer([ItemCounter()]), monitor=("nope",))


async def test_aclose_is_idempotent_and_works_unstarted():
    gate = HistoryGate(Scorer([ItemCounter()]))
    assert await gate.aclose() == {}
    gate, _, _ = await started()
    await gate.aclose()
    assert await gate.aclose() == {}


async def test_monitor_flags_are_recorded_and_counted_like_the_stages_own(tmp_path):
    from deltaguard.recording import TranscriptRecorder, read_recorded
    from deltaguard.telemetry.metrics import PrometheusMetrics

    metrics = PrometheusMetrics()
    scorer = Scorer([ItemCounter(), RudeWatcher("watch", "monitor")])
    flags = MemorySink()
    gate = HistoryGate(
        scorer,
        monitor=("watch",),
        flag_sink=flags,
        metrics=metrics,
        recorder=TranscriptRecorder(tmp_path / "flags.db", scorer),
    )
    await gate.start()
    turn = await gate.check(chat_history_items([{"role": "user", "content": "you are RUDE"}]))
    verdict = await gate.monitor(turn)
    assert verdict is not None and verdict.flagged_categories == ["toxicity"]
    await gate.aclose()
    assert [(e.lane, e.categories) for e in flags.events if isinstance(e, FlagEvent)] == [
        ("monitor", ["toxicity"])
    ]
    recorded = read_recorded(tmp_path / "flags.db")
    assert [r.conversation_id for r in recorded] == [turn.conversation_id]
    monitor_turns = metrics.registry.get_sample_value(
        "deltaguard_lane_turn_latency_seconds_count", {"lane": "monitor"}
    )
    assert monitor_turns == 1

"""Delta-only scoring over the store: continuations, forks, eviction and rebuild."""

from __future__ import annotations

import threading
import time

import pytest

from deltaguard.errors import PreviousResponseNotFound
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
from tests.support.toy import ItemCounter, ManualClock


def user(text):
    return parse_item({"role": "user", "content": text})


def tracker(**limits):
    clf = ItemCounter()
    return ConversationTracker(Scorer([clf]), ConversationStore(StoreLimits(**limits))), clf


def test_each_turn_scores_only_its_new_items():
    t, clf = tracker()
    t.score_turn("r1", [user("one"), user("two")])
    t.score_output("r1", [parse_item({"role": "assistant", "content": "ok"})])
    clf.items_seen = 0
    turn = t.score_turn("r2", [user("three")], "r1")
    assert clf.items_seen == 1
    assert turn.fold.after.length == 4 and turn.fold.after.states["counter"]["n"] == 4
    assert turn.rebuild is None and t.store.stats.hits >= 1


def test_forks_continue_from_the_parent_state():
    t, _ = tracker()
    t.score_turn("root", [user("shared")])
    a = t.score_turn("a", [user("BOOM")], "root")
    b = t.score_turn("b", [user("calm")], "root")
    assert a.fold.after.scores["secrets"] == 1.0
    assert b.fold.after.scores["secrets"] == 0.0  # the sibling never saw BOOM
    assert b.fold.before.chain == a.fold.before.chain
    assert t.store.record("a").conversation_id == t.store.record("b").conversation_id == "root"


def test_evicted_snapshot_is_rebuilt_from_history_with_the_same_state():
    t, clf = tracker(max_snapshots=1)
    t.score_turn("r1", [user("BOOM")])
    t.score_turn("r2", [user("x")], "r1")
    t.score_turn("other", [user("unrelated")])  # evicts r2's snapshot
    clf.items_seen = 0
    turn = t.score_turn("r3", [user("y")], "r2")
    assert turn.rebuild is not None and t.store.stats.rebuilds == 1
    assert clf.items_seen == 3  # two history items refolded, one new
    assert turn.fold.after.scores["secrets"] == 1.0
    assert turn.fold.after.states["counter"]["n"] == 3


def test_history_survives_eviction_of_ancestor_ids():
    t, _ = tracker(max_responses=2, max_snapshots=1)
    t.score_turn("r1", [user("BOOM")])
    t.score_turn("r2", [user("b")], "r1")
    t.score_turn("r3", [user("c")], "r2")  # r1's id is evicted, its items live on in r3's chain
    with pytest.raises(PreviousResponseNotFound):
        t.score_turn("x", [user("d")], "r1")
    t.store.snapshots.clear()
    turn = t.score_turn("r4", [user("d")], "r3")
    assert turn.fold.after.length == 4 and turn.fold.after.scores["secrets"] == 1.0


def test_unknown_previous_response_is_a_clear_error():
    t, _ = tracker()
    with pytest.raises(PreviousResponseNotFound) as exc:
        t.score_turn("r2", [user("hi")], "resp_nope")
    assert exc.value.code == "previous_response_not_found" and "resp_nope" in str(exc.value)


def test_expired_response_is_not_found():
    clock = ManualClock()
    store = ConversationStore(StoreLimits(ttl_s=5), clock=clock)
    t = ConversationTracker(Scorer([ItemCounter()]), store)
    t.score_turn("r1", [user("hi")])
    clock.now = 6
    with pytest.raises(PreviousResponseNotFound):
        t.score_turn("r2", [user("again")], "r1")


def test_resent_history_matches_the_longest_scored_prefix():
    t, clf = tracker()
    history = [user("a"), user("b"), parse_item({"role": "assistant", "content": "c"})]
    t.score_history("r1", history[:2])
    clf.items_seen = 0
    turn = t.score_history("r2", [*history, user("d")])
    assert clf.items_seen == 2  # c and d only
    assert turn.fold.after.length == 4
    # An edited history matches only up to the last snapshot before the edit
    # (snapshots are taken where requests ended): here none, so all is scored.
    clf.items_seen = 0
    t.score_history("r3", [user("a"), user("CHANGED"), user("d")])
    assert clf.items_seen == 3
    clf.items_seen = 0
    t.score_history("r4", [*history[:2], user("CHANGED")])
    assert clf.items_seen == 1


def test_resent_history_after_eviction_is_scored_in_full_with_same_result():
    t, _ = tracker(max_snapshots=1)
    first = t.score_history("r1", [user("BOOM"), user("b")])
    t.score_history("x", [user("other")])
    again = t.score_history("r2", [user("BOOM"), user("b")])
    assert again.fold.after.scores == first.fold.after.scores
    assert t.store.stats.misses == 3


def test_a_lane_that_keeps_only_snapshots_catches_up_on_another_lanes_records():
    gate, _ = tracker()
    beside, clf = tracker()
    first = gate.score_turn("r1", [user("one"), user("two")])
    gate.append_output("r1", [parse_item({"role": "assistant", "content": "ok"})])
    snapshot, fold = beside.catch_up(first.record)
    assert fold is not None and snapshot.states["counter"]["n"] == 2 and beside.store.stats.misses == 1
    assert beside.catch_up(first.record) == (snapshot, None)  # kept: nothing folded again
    second = gate.score_turn("r2", [user("three")], "r1")
    clf.items_seen = 0
    snapshot, fold = beside.catch_up(second.record)
    assert clf.items_seen == 2  # the answer and the new item, after the kept snapshot
    assert snapshot.states["counter"]["n"] == 4 and snapshot.chain == second.record.chain
    assert beside.store.stats.hits == 2 and beside.store.stats.misses == 1


def test_the_conversation_indexes_are_bounded_in_bytes_with_the_records():
    # Each answered turn adds an entry to each index: they hold no more than the bound
    # the records and snapshots have, counted as the process holds them.
    t, _ = tracker(max_bytes=40_000)
    for i in range(300):
        t.score_turn(f"r{i}", [user(f"task {i}")])
        t.finish(f"r{i}", [parse_item({"role": "assistant", "content": "done"})], {}, index=True)
    for index in (t.store.conversations, t.store.ends):
        assert 0 < len(index) < 300 and index.nbytes <= 40_000 and index.evictions > 0
    assert t.ended_at([user("task 299"), parse_item({"role": "assistant", "content": "done"})])[1] == 2


def test_an_answer_is_folded_once_when_the_post_lane_and_the_next_turn_meet():
    """The post-inference lane scores a response's answer while the next turn, resuming
    after it, arrives: one of them folds the answer, the other takes its snapshot."""
    release, entered = threading.Event(), threading.Event()

    class SlowOnAnswers(ItemCounter):
        def update(self, state, items):
            if any(i.text == "answer" for i in items):
                entered.set()
                release.wait(10)
            return super().update(state, items)

    clf = SlowOnAnswers()
    t = ConversationTracker(Scorer([clf]))
    t.score_turn("r1", [user("one")])
    t.append_output("r1", [parse_item({"role": "assistant", "content": "answer"})])
    clf.items_seen = 0
    done: dict[str, object] = {}
    post = threading.Thread(target=lambda: done.update(post=t.score_pending("r1")))
    post.start()
    assert entered.wait(10)
    turn = threading.Thread(target=lambda: done.update(turn=t.score_turn("r2", [user("two")], "r1")))
    turn.start()
    time.sleep(0.2)  # the next turn reaches the answer's fold, which the post lane holds
    release.set()
    post.join(10)
    turn.join(10)
    assert clf.items_seen == 2  # the answer once, the new message once
    assert done["turn"].rebuild is None and done["turn"].fold.after.states["counter"]["n"] == 3
    assert done["post"].fold.after.states["counter"]["n"] == 2

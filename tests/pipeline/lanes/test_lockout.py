"""ConversationLockout: flags that refuse later turns, and the repeated-block lock-out."""

from __future__ import annotations

from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.state.backends import SqliteBackend


def test_the_limit_refuses_the_conversation_once_with_every_category_seen():
    lockout = ConversationLockout(block_limit=3)
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None
    assert lockout.count_blocked_turn("t", "c", ["prompt_injection"]) is None
    assert lockout.flagged("t", "c") == frozenset()
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) == ["jailbreak", "prompt_injection"]
    assert lockout.flagged("t", "c") == {"jailbreak", "prompt_injection"}
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None  # said once


def test_secrets_and_pii_blocks_are_not_probing():
    lockout = ConversationLockout(block_limit=1)
    assert lockout.count_blocked_turn("t", "c", ["secrets", "pii"]) is None
    assert lockout.flagged("t", "c") == frozenset()


def test_no_limit_never_locks_out():
    lockout = ConversationLockout(block_limit=None)
    for _ in range(10):
        assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None


def test_tenants_and_conversations_are_kept_apart():
    lockout = ConversationLockout(block_limit=1)
    lockout.mark("a", "c", ["jailbreak"])
    assert lockout.flagged("b", "c") == frozenset()
    assert lockout.flagged("a", "other") == frozenset()
    lockout.mark("a", "c", ["toxicity"])
    assert lockout.flagged("a", "c") == {"jailbreak", "toxicity"}


def _history(*texts: str):
    from deltaguard.parsing import parse_item

    return [
        parse_item({"role": "user" if k % 2 == 0 else "assistant", "content": t}) for k, t in enumerate(texts)
    ]


LONG = _history(
    "We are migrating the ledger tables to the new cluster next week; list the risks you see.",
    "The main risks are replication lag during the cut-over, foreign keys that span both "
    "clusters, and batch jobs that still write to the old primary after the switch.",
    "Which batch jobs write to the old primary, and how do we find them before the switch?",
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_lock_lasts_lock_s_and_its_near_copies_are_locked_with_it():
    clock = Clock()
    lockout = ConversationLockout(block_limit=1, lock_s=60, clock=clock)
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"], lambda: LONG) == ["jailbreak"]
    lock = lockout.lock_of("t", "c", lambda: LONG, client="", first_turn=False)
    assert lock is not None and lock.until == 1060
    copy = [*_history(LONG[0].text.replace("next", "nxt")), *LONG[1:], *_history("thanks")]
    assert lockout.lock_of("t", "other", lambda: copy, client="", first_turn=True) is not None
    assert lockout.lock_of("u", "other", lambda: copy, client="", first_turn=True) is None  # other tenant
    unrelated = _history("Plan a three-day trip to Lisbon with a day on the coast and good seafood, please.")
    assert lockout.lock_of("t", "new", lambda: unrelated * 3, client="", first_turn=True) is None
    clock.now += 61
    assert lockout.lock_of("t", "other", lambda: copy, client="", first_turn=True) is None
    assert lockout.flagged("t", "c") == frozenset()


def test_a_short_history_is_not_sketched():
    lockout = ConversationLockout(block_limit=1)
    lockout.count_blocked_turn("t", "c", ["jailbreak"], lambda: _history("hello", "Hi! How can I help?"))
    same = _history("hello", "Hi! How can I help?", "thanks")
    assert lockout.lock_of("t", "other", lambda: same, client="", first_turn=True) is None


def test_blocked_first_turns_lock_the_client_within_the_window_only():
    clock = Clock()
    lockout = ConversationLockout(block_limit=2, lock_s=60, first_turn_window_s=10, clock=clock)
    assert lockout.count_blocked_first_turn("t", "eve", ["jailbreak"]) is None
    clock.now += 11  # the first one left the window
    assert lockout.count_blocked_first_turn("t", "eve", ["jailbreak"]) is None
    assert lockout.count_blocked_first_turn("t", "eve", ["secrets"]) is None  # not probing
    assert lockout.count_blocked_first_turn("t", "eve", ["jailbreak"]) == ["jailbreak"]
    assert lockout.lock_of("t", "c9", list, client="eve", first_turn=True) is not None
    assert lockout.lock_of("t", "c9", list, client="eve", first_turn=False) is None  # its open conversations
    assert lockout.lock_of("t", "c9", list, client="bob", first_turn=True) is None


def _copy_of(history):
    """A near-copy: a character changed, and a turn more."""
    return [*_history(history[0].text.replace("next", "nxt")), *history[1:], *_history("thanks")]


def test_a_near_copy_sent_to_another_replica_is_locked(redis_pair):
    clock = Clock()
    one, two = (ConversationLockout(block_limit=1, lock_s=60, clock=clock, backend=b) for b in redis_pair)
    assert two.lock_of("t", "other", lambda: _copy_of(LONG), client="", first_turn=True) is None
    assert one.count_blocked_turn("t", "c", ["jailbreak"], lambda: LONG) == ["jailbreak"]
    lock = two.lock_of("t", "other", lambda: _copy_of(LONG), client="", first_turn=True)
    assert lock is not None and lock.until == 1060 and "copies a locked conversation" in lock.why
    assert two.lock_of("u", "other", lambda: _copy_of(LONG), client="", first_turn=True) is None  # tenants
    clock.now += 61
    assert two.lock_of("t", "other", lambda: _copy_of(LONG), client="", first_turn=True) is None


def test_a_restarted_gateway_still_locks_near_copies(tmp_path):
    clock = Clock()
    before = ConversationLockout(block_limit=1, clock=clock, backend=SqliteBackend(tmp_path / "s.db"))
    before.count_blocked_turn("t", "c", ["jailbreak"], lambda: LONG)
    after = ConversationLockout(block_limit=1, clock=clock, backend=SqliteBackend(tmp_path / "s.db"))
    assert after.lock_of("t", "other", lambda: _copy_of(LONG), client="", first_turn=True) is not None


def _distinct(seed: int):
    """A history of its own: 60 words no other seed's history shares in that order."""
    import random

    words = "ledger cluster replica batch primary switch lag foreign key job cut over risk table".split()
    rng = random.Random(seed)
    return _history(" ".join(rng.choice(words) + str(rng.randrange(100)) for _ in range(60)))


def test_each_tenant_keeps_its_newest_sketches_only_and_replicas_locking_at_once_keep_both(redis_pair):
    clock = Clock()
    one, two = (
        ConversationLockout(block_limit=1, clock=clock, backend=b, max_sketches=2) for b in redis_pair
    )
    distinct = [_distinct(seed) for seed in range(3)]
    one.count_blocked_turn("t", "c0", ["jailbreak"], lambda: distinct[0])
    two.count_blocked_turn("t", "c1", ["jailbreak"], lambda: distinct[1])  # the other replica
    for lockout, k in ((one, 0), (two, 1)):  # both locks are in the shared index
        assert lockout.lock_of("t", "new", lambda k=k: distinct[k], client="", first_turn=True) is not None
    one.count_blocked_turn("t", "c2", ["jailbreak"], lambda: distinct[2])
    assert two.lock_of("t", "new", lambda: distinct[2], client="", first_turn=True) is not None
    assert two.lock_of("t", "new", lambda: distinct[1], client="", first_turn=True) is not None
    # the oldest went: its own conversation stays locked, its copies no longer are
    assert two.lock_of("t", "new", lambda: distinct[0], client="", first_turn=True) is None
    assert two.lock_of("t", "c0", list, client="", first_turn=False) is not None


def test_a_sketch_survives_its_round_trip_through_text():
    from deltaguard.lanes.lockout import HistorySketch

    sketch = HistorySketch.of(LONG)
    assert sketch is not None and HistorySketch.from_text(sketch.to_text()) == sketch

"""Every state backend through the same checks: continuations, forks, notes, restarts,
tenants, expiry, the lock-out; Redis is a real redis-server on 127.0.0.1."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from deltaguard.errors import PreviousResponseNotFound, StateBackendError
from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.parsing import parse_item
from deltaguard.state.backends import SqliteBackend, open_backend, parse_state_url
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
from tests.support.state_servers import redis_server
from tests.support.toy import ItemCounter

BACKENDS = ["memory", "sqlite", "redis"]


def user(text):
    return parse_item({"role": "user", "content": text})


def answer(text):
    return parse_item({"role": "assistant", "content": text})


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as url:
        yield url


def _url(request, tmp_path):
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/state.db"
    url = request.getfixturevalue("redis_url")
    backend = open_backend(url)
    backend._client.flushdb()
    backend.close()
    return url


@pytest.fixture(params=BACKENDS)
def state_url(request, tmp_path):
    return _url(request, tmp_path)


@pytest.fixture(params=[b for b in BACKENDS if b != "memory"])
def durable_url(request, tmp_path):
    """A backend that outlives the process (memory:// keeps nothing beyond it)."""
    return _url(request, tmp_path)


def tracker(backend, namespace="gate/default", **limits):
    scorer = Scorer([ItemCounter()])
    store = ConversationStore(
        StoreLimits(**limits), backend=backend, namespace=namespace, scorer_tag=scorer.tag
    )
    return ConversationTracker(scorer, store)


def test_continuations_forks_and_notes_keep_their_shape(state_url):
    backend = open_backend(state_url)
    t = tracker(backend)
    t.score_turn("r1", [user("BOOM")])
    t.append_output("r1", [answer("ok")])
    t.annotate("r1", {"digest": b"\x00\xff", "tools": [{"name": "ls"}]}, index=True)
    a = t.score_turn("a", [user("one")], "r1")
    b = t.score_turn("b", [user("two")], "r1")
    assert a.fold.after.states["counter"]["n"] == b.fold.after.states["counter"]["n"] == 3
    assert a.fold.after.scores["secrets"] == 1.0
    rec = t.record("a")
    assert [i.text for i in rec.history()] == ["BOOM", "ok", "one"]
    assert t.record("r1").notes == {"digest": b"\x00\xff", "tools": [{"name": "ls"}]}
    assert t.ended_at([user("BOOM"), answer("ok"), user("x")])[1] == 2
    if backend is not None:
        backend.close()


def test_a_new_process_continues_from_the_backend(durable_url):
    """What a restarted gateway (or another replica) sees: the same records and verdicts."""
    state_url = durable_url
    first = open_backend(state_url)
    t = tracker(first)
    t.score_turn("r1", [user("BOOM"), user("b")])
    t.append_output("r1", [answer("c")])
    t.score_pending("r1")
    t.score_turn("r2", [user("d")], "r1")
    first.close()

    second = open_backend(state_url)
    again, clf = tracker(second), None
    clf = again.scorer.classifiers[0]
    turn = again.score_turn("r3", [user("e")], "r2")
    assert clf.items_seen == 1  # the snapshot came back from the backend: only e is folded
    assert turn.fold.after.states["counter"]["n"] == 5 and turn.fold.after.scores["secrets"] == 1.0
    assert [i.text for i in again.record("r3").history()] == ["BOOM", "b", "c", "d", "e"]
    assert again.record("r1").conversation_id == "r1" == again.record("r3").conversation_id
    second.close()


class Doubler(ItemCounter):
    """The counter's next version: two per item, so a resumed state shows which made it."""

    version = "test-2"

    def update(self, state, items):
        upd = super().update(state, items)
        return dataclasses.replace(upd, state={**upd.state, "n": state["n"] + 2 * len(items)})


def test_a_process_with_other_models_refolds_the_history_it_resumes(durable_url):
    """An upgrade restarts onto the old process's backend: the records carry over, the
    states the old models made do not, and the verdict is the new models' full rescore."""
    first = open_backend(durable_url)
    tracker(first).score_turn("r1", [user("BOOM"), user("b")])
    first.close()

    second = open_backend(durable_url)
    store = ConversationStore(StoreLimits(), backend=second, scorer_tag=Scorer([Doubler()]).tag)
    upgraded = ConversationTracker(Scorer([Doubler()]), store)
    turn = upgraded.score_turn("r2", [user("c")], "r1")
    assert turn.fold.after.states["counter"]["n"] == 6  # 2 x 3 items, not 2 + 2 x 1
    assert upgraded.scorer.classifiers[0].items_seen == 3 and store.stats.rebuilds == 1
    assert turn.fold.after.scores["secrets"] == 1.0
    second.close()

    # The old version, still running on another replica, keeps its own snapshots.
    third = open_backend(durable_url)
    old = tracker(third)
    assert old.score_turn("r3", [user("d")], "r1").fold.after.states["counter"]["n"] == 3
    assert old.scorer.classifiers[0].items_seen == 1
    third.close()


def test_a_store_refuses_a_scorer_it_does_not_keep_snapshots_for():
    store = ConversationStore(scorer_tag=Scorer([ItemCounter()]).tag)
    with pytest.raises(ValueError, match="snapshots of scorer"):
        ConversationTracker(Scorer([Doubler()]), store)
    assert Scorer([ItemCounter()]).tag != Scorer([Doubler()]).tag


def test_tenants_and_lanes_are_namespaces(state_url):
    backend = open_backend(state_url)
    alpha, beta = tracker(backend, "gate/alpha"), tracker(backend, "gate/beta")
    alpha.score_turn("r1", [user("mine")])
    with pytest.raises(PreviousResponseNotFound):
        beta.score_turn("r2", [user("theirs")], "r1")
    if backend is not None:
        backend.close()


def test_lockout_is_kept_in_the_backend(state_url):
    backend = open_backend(state_url)
    lockout = ConversationLockout(2, frozenset({"jailbreak"}), backend=backend)
    assert lockout.count_blocked_turn("t", "c1", ["jailbreak"]) is None
    other = ConversationLockout(2, frozenset({"jailbreak"}), backend=backend) if backend else lockout
    assert other.count_blocked_turn("t", "c1", ["jailbreak"]) == ["jailbreak"]
    assert lockout.flagged("t", "c1") == frozenset({"jailbreak"})
    assert lockout.flagged("u", "c1") == frozenset()  # another tenant
    if backend is not None:
        backend.close()


def test_records_are_json_in_the_backend(tmp_path):
    backend = SqliteBackend(tmp_path / "s.db")
    t = tracker(backend)
    t.score_turn("r1", [user("hi")])
    t.annotate("r1", {"digest": b"\x01"})
    text = backend.get("gate/default/r/r1")
    obj = json.loads(text)
    assert obj["items"][0]["text"] == "hi" and obj["notes"] == {"digest": {"$bytes": "01"}}
    snapshot = backend.get(f"gate/default/s/{t.scorer.tag}/" + t.record("r1").chain.hex())
    assert json.loads(snapshot)["states"]["counter"]["n"] == 1


def test_a_conversations_records_expire_together(tmp_path):
    now = [0.0]
    backend = SqliteBackend(tmp_path / "s.db", clock=lambda: now[0])
    backend.put("r1", "1", ttl_s=10, group="c")
    now[0] = 8
    backend.put("r2", "2", ttl_s=10, group="c")
    now[0] = 15  # r1's own expiry has passed, its group's (18) has not
    assert backend.get("r1") == "1"
    now[0] = 19
    assert backend.get("r1") is None and backend.get("r2") is None


def test_redis_groups_renew_every_member(redis_url):
    backend = open_backend(redis_url)
    backend.put("x1", "1", ttl_s=1, group="g")
    time.sleep(0.6)  # past the half ttl: the next write renews the whole group
    backend.put("x2", "2", ttl_s=60, group="g")
    assert backend._client.pttl("deltaguard:x1") > 60_000
    backend.put("x3", "3", ttl_s=60, group="g")  # within the half ttl: no renewal, same horizon
    assert backend._client.pttl("deltaguard:x3") > 60_000
    backend.close()


def test_bad_urls_are_refused_with_what_is_expected():
    for bad in ("postgres://x", "sqlite://relative.db", "memory://x", "redis"):
        with pytest.raises(StateBackendError, match=r"memory://|sqlite"):
            parse_state_url(bad)


def test_an_unreachable_redis_fails_with_a_state_error():
    backend = open_backend("redis://127.0.0.1:1/0")
    with pytest.raises(StateBackendError, match=r"127\.0\.0\.1:1"):
        backend.ping()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_updates_from_two_clients_at_once_lose_nothing(kind, tmp_path, request):
    """Two replicas (two connections) raising one counter at once, as two gateways count
    blocked turns of one conversation: every raise is kept."""
    url = f"sqlite://{tmp_path}/state.db" if kind == "sqlite" else request.getfixturevalue("redis_url")
    clients = [open_backend(url) for _ in range(2)]
    clients[0].delete("counter")

    def raise_counter(backend, times=150):
        for _ in range(times):
            backend.update("counter", lambda old: str(int(old or 0) + 1), ttl_s=60)

    threads = [threading.Thread(target=raise_counter, args=(b,)) for b in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clients[0].get("counter") == clients[1].get("counter") == "300"
    for b in clients:
        b.close()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_fields_two_clients_add_at_once_are_all_kept_and_expire_with_their_key(kind, tmp_path, request):
    """Two replicas noting pending jobs of one conversation at once (`put_field`)."""
    url = f"sqlite://{tmp_path}/state.db" if kind == "sqlite" else request.getfixturevalue("redis_url")
    clients = [open_backend(url) for _ in range(2)]
    clients[0].delete("pending")

    def add(backend, side, times=150):
        for n in range(times):
            backend.put_field("pending", f"{side}{n}", str(n), ttl_s=60)

    threads = [threading.Thread(target=add, args=(b, side)) for b, side in zip(clients, "ab", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(clients[1].fields("pending")) == 300 and clients[1].fields("pending")["b7"] == "7"
    clients[0].delete_field("pending", "a3")
    clients[0].delete_field("pending", "nothing")
    clients[0].delete_field("absent", "a3")
    assert "a3" not in clients[1].fields("pending") and len(clients[1].fields("pending")) == 299
    assert clients[0].fields("absent") == {}
    clients[0].put_field("brief", "x", "1", ttl_s=0.2)
    time.sleep(0.3)
    assert clients[1].fields("brief") == {}
    for b in clients:
        b.close()


def test_the_lockout_counts_blocked_turns_through_the_backend_atomically(redis_url):
    """Blocked turns of one conversation counted by two replicas at once: the limit is
    reached exactly once, at the limit-th block."""
    backends = [open_backend(redis_url) for _ in range(2)]
    backends[0]._client.flushdb()
    replicas = [ConversationLockout(block_limit=40, backend=b) for b in backends]
    locked: list[list[str]] = []

    def block(lockout, times=20):
        for _ in range(times):
            found = lockout.count_blocked_turn("t", "c1", ["jailbreak"])
            if found is not None:
                locked.append(found)

    threads = [threading.Thread(target=block, args=(r,)) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert locked == [["jailbreak"]]
    for b in backends:
        b.close()

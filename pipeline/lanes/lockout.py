"""Which conversations are refused before their turn is even scored, and why.

Two things refuse a conversation's later turns: a monitor-lane flag in a `block`
category (local, or from a remote worker), and the lock-out. A blocked turn never joins
the history, so a client could rephrase a refused request again and again from the same
point until one version passes; after `block_limit` turns of one conversation blocked
on their own content in `probe_categories`, the conversation is locked for `lock_s`.

A lock must hold against the ways around it:

- a near-copy of the locked history (a character changed, the history copied into a new
  Conversations API conversation, sent to the guard API or the chat endpoint) is a new
  conversation to the store, so each lock keeps a similarity sketch of its history
  (`HistorySketch`: a bottom-k sample of hashed character shingles, never the text), and
  a turn whose history contains most of a locked sketch is locked too;
- a blocked first turn has no conversation to count in, so blocked first turns count per
  client key (tenant and end-user) within `first_turn_window_s`; at `block_limit` that
  client's new conversations are refused for `lock_s`. Other end-users of the tenant are
  not: their keys and histories differ.

Operator text (system and developer messages, instructions, tool definitions) is left
out of sketches: it is the same for every user of a deployment.

>>> lockout = ConversationLockout(block_limit=2, probe_categories=frozenset({"jailbreak"}))
>>> lockout.count_blocked_turn("default", "c1", ["jailbreak"]) is None
True
>>> lockout.count_blocked_turn("default", "c1", ["jailbreak"])
['jailbreak']
>>> sorted(lockout.flagged("default", "c1"))
['jailbreak']
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from deltaguard import defaults
from deltaguard.items import DEFINITIONS_ROLE, INSTRUCTIONS_ROLE, Item
from deltaguard.state.backends import StateBackend
from deltaguard.state.tiers import StateMap

SHINGLE_CHARS = 8
SKETCH_SIZE = 128  # hashes kept per locked history
MIN_SKETCH_SHINGLES = 200  # a shorter history tells too little apart to lock its copies
CONTAINED = 0.8  # the share of a locked sketch a history must contain to be its copy
MAX_SKETCH_CHARS = 256 * 1024  # of a history, the text sketched
OPERATOR_ROLES = frozenset({"system", "developer", INSTRUCTIONS_ROLE, DEFINITIONS_ROLE})
_SPACE = re.compile(r"\s+")
_ENTRY_BYTES = 200  # a conversation's key and its categories, counts or lock


def _shingles(items: Sequence[Item]) -> set[int]:
    text = "\n".join(i.text for i in items if i.role not in OPERATOR_ROLES and i.text)
    text = _SPACE.sub(" ", text[:MAX_SKETCH_CHARS].lower()).encode("utf-8", "surrogatepass")
    return {zlib.crc32(text[k : k + SHINGLE_CHARS]) for k in range(max(0, len(text) - SHINGLE_CHARS + 1))}


@dataclass(frozen=True, slots=True)
class HistorySketch:
    """The `SKETCH_SIZE` smallest shingle hashes of a history: a uniform sample of its
    shingles, so the share of them another history holds estimates how much of this one
    it contains."""

    hashes: frozenset[int]

    @classmethod
    def of(cls, items: Sequence[Item]) -> HistorySketch | None:
        """None when the history is too short to sketch."""
        shingles = _shingles(items)
        if len(shingles) < MIN_SKETCH_SHINGLES:
            return None
        return cls(frozenset(sorted(shingles)[:SKETCH_SIZE]))

    def contained_in(self, shingles: set[int]) -> float:
        return sum(h in shingles for h in self.hashes) / len(self.hashes)


@dataclass(frozen=True, slots=True)
class Lock:
    """Why a conversation (or a client's new conversations) is refused, and until when."""

    categories: tuple[str, ...]
    until: float  # wall-clock seconds
    why: str


class ConversationLockout:
    """Per (tenant, conversation): the categories that refuse its next turns, how many of
    its turns were blocked on their own content, and its lock; per tenant, the sketches of
    locked histories; per client key, its blocked first turns. All bounded like the
    conversation store (locks by `lock_s`), and all but the sketches kept in its backend
    (read from it first when replicas share it)."""

    def __init__(
        self,
        block_limit: int | None = defaults.BLOCK_LIMIT,
        probe_categories: frozenset[str] = defaults.PROBE_CATEGORIES,
        max_conversations: int = defaults.MAX_RESPONSES,
        ttl_s: float = defaults.STATE_TTL_S,
        lock_s: float = defaults.LOCK_S,
        first_turn_window_s: float = defaults.FIRST_TURN_WINDOW_S,
        max_locks: int = 1000,
        clock: Callable[[], float] = time.time,
        backend: StateBackend | None = None,
    ) -> None:
        self.block_limit = block_limit
        self.probe_categories = probe_categories
        self.lock_s = lock_s
        self.first_turn_window_s = first_turn_window_s
        self.clock = clock

        def bounded(name: str, ttl: float, encode: Any, decode: Any) -> Any:
            return StateMap(
                f"lockout/{name}",
                max_entries=max_conversations,
                max_bytes=max_conversations * _ENTRY_BYTES,
                ttl_s=ttl,
                encode=encode,
                decode=decode,
                size=lambda _: _ENTRY_BYTES,
                backend=backend,
                fresh=True,
            )

        self._flags: StateMap[tuple[str, str], frozenset[str]] = bounded(
            "flags", ttl_s, lambda v: json.dumps(sorted(v)), lambda text: frozenset(json.loads(text))
        )
        self._blocked: StateMap[tuple[str, str], tuple[int, frozenset[str]]] = bounded(
            "blocked", ttl_s, lambda v: json.dumps([v[0], sorted(v[1])]), _decode_blocked
        )
        self._locks: StateMap[tuple[str, str], Lock] = bounded("locks", lock_s, _lock_json, _lock_from_json)
        # (tenant, conversation) -> its locked history's sketch: the newest `max_locks`, live
        # (in this process only: a near-copy is caught by the replica that locked it).
        self._sketches: OrderedDict[tuple[str, str], tuple[HistorySketch, Lock]] = OrderedDict()
        self.max_locks = max_locks
        self._first_turns: StateMap[tuple[str, str], tuple[float, ...]] = bounded(
            "first_turns", first_turn_window_s, json.dumps, lambda text: tuple(json.loads(text))
        )
        self._client_locks: StateMap[tuple[str, str], Lock] = bounded(
            "client_locks", lock_s, _lock_json, _lock_from_json
        )

    def _live(self, lock: Lock | None) -> Lock | None:
        return lock if lock is not None and lock.until > self.clock() else None

    def flagged(self, tenant: str, conversation_id: str) -> frozenset[str]:
        """Categories flagged earlier in the conversation (refused when their action is
        block), its lock's among them while it lasts."""
        flags = self._flags.get((tenant, conversation_id)) or frozenset()
        lock = self._live(self._locks.get((tenant, conversation_id)))
        return flags | set(lock.categories) if lock is not None else flags

    def mark(self, tenant: str, conversation_id: str, categories: Sequence[str]) -> None:
        # read-modify-write in the backend, atomically: two replicas' marks both stay
        self._flags.update((tenant, conversation_id), lambda old: (old or frozenset()) | set(categories))

    def count_blocked_turn(
        self,
        tenant: str,
        conversation_id: str,
        categories: Sequence[str],
        history: Callable[[], Sequence[Item]] = tuple,
    ) -> list[str] | None:
        """Count a turn blocked on its own content in `categories`.

        Returns every category the conversation's blocked turns named, exactly once: on
        the turn that reaches `block_limit` (the conversation is then locked, and its
        history, `history()`, before the blocked turn, sketched); else None.
        """
        probing = [c for c in categories if c in self.probe_categories]
        if self.block_limit is None or not probing:
            return None
        key = (tenant, conversation_id)

        def counted(old: tuple[int, frozenset[str]] | None) -> tuple[int, frozenset[str]]:
            count, seen = old or (0, frozenset())
            return count + 1, seen | set(probing)

        count, seen = self._blocked.update(key, counted)  # atomic: replicas' blocks all count
        if count != self.block_limit:
            return None
        why = f"{count} turns of this conversation were blocked"
        lock = Lock(tuple(sorted(seen)), self.clock() + self.lock_s, why)
        self._locks.put(key, lock)
        sketch = HistorySketch.of(history())
        if sketch is not None:
            self._sketches[key] = (sketch, lock)
            while len(self._sketches) > self.max_locks:
                self._sketches.popitem(last=False)
        return sorted(seen)

    def count_blocked_first_turn(
        self, tenant: str, client: str, categories: Sequence[str]
    ) -> list[str] | None:
        """Count a blocked first turn of a conversation against the client key; at
        `block_limit` within `first_turn_window_s`, the client's new conversations are
        locked (returns the categories, once)."""
        probing = sorted(c for c in categories if c in self.probe_categories)
        if self.block_limit is None or not probing:
            return None
        key, now = (tenant, client), self.clock()
        limit = self.block_limit

        def counted(old: tuple[float, ...] | None) -> tuple[float, ...]:
            # one past the limit kept: the turn that reaches it locks, the next ones do not
            return (*(t for t in old or () if t > now - self.first_turn_window_s), now)[-(limit + 1) :]

        times = self._first_turns.update(key, counted)  # atomic: replicas' blocks all count
        if len(times) != self.block_limit:
            return None
        window = f"{self.first_turn_window_s:g} s"
        why = f"{len(times)} first turns from this client were blocked within {window}"
        self._client_locks.put(key, Lock(tuple(probing), now + self.lock_s, why))
        return probing

    def lock_of(
        self,
        tenant: str,
        conversation_id: str,
        history: Callable[[], Sequence[Item]],
        *,
        client: str,
        first_turn: bool,
    ) -> Lock | None:
        """The lock that refuses this turn, if any: its conversation's, its client's (for
        a first turn), or a locked history's that `history()` nearly copies. The history
        is read only while the tenant has locked sketches."""
        lock = self._live(self._locks.get((tenant, conversation_id)))
        if lock is not None:
            return lock
        if first_turn and (lock := self._live(self._client_locks.get((tenant, client)))) is not None:
            return lock
        for key in [k for k, (_, lock) in self._sketches.items() if not self._live(lock)]:
            del self._sketches[key]
        sketches = [
            (k[1], v) for k, v in self._sketches.items() if k[0] == tenant and k[1] != conversation_id
        ]
        if not sketches:
            return None
        shingles = _shingles(history())
        for _, (sketch, lock) in sketches:
            if sketch.contained_in(shingles) >= CONTAINED:
                return Lock(
                    lock.categories, lock.until, f"its history copies a locked conversation ({lock.why})"
                )
        return None


def _decode_blocked(text: str) -> tuple[int, frozenset[str]]:
    count, seen = json.loads(text)
    return int(count), frozenset(seen)


def _lock_json(lock: Lock) -> str:
    return json.dumps(asdict(lock))


def _lock_from_json(text: str) -> Lock:
    obj = json.loads(text)
    return Lock(tuple(obj["categories"]), float(obj["until"]), str(obj["why"]))

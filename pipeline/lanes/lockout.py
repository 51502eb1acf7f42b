"""Which conversations are refused before their turn is even scored, and why.

Two things refuse a conversation's later turns: a monitor-lane flag in a `block`
category (local, or from a remote worker), and the lock-out. The gate reads the flags once
the monitor verdicts still pending on its conversation are in (bounded:
`pending_verdicts.PendingVerdicts`), on whichever replica they are judged. A blocked turn never joins
the history, so a client could rephrase a refused request again and again from the same
point until one version passes; after `block_limit` turns of one conversation blocked
on their own content in `probe_categories`, the conversation is locked for `lock_s`.

A lock must hold against the ways around it:

- a near-copy of the locked history (a character changed, the history copied into a new
  Conversations API conversation, sent to the guard API or the chat endpoint) is a new
  conversation to the store, so each lock keeps a similarity sketch of its history
  (`HistorySketch`: a bottom-k sample of hashed character shingles, never the text), and
  a turn whose history contains most of a locked sketch is locked too. The sketches are
  state like the locks: in the backend, so a near-copy sent to another replica (or after
  a restart) is refused too; the newest `max_sketches` per tenant;
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

import base64
import json
import re
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from deltaguard import defaults
from deltaguard.items import DEFINITIONS_ROLE, INSTRUCTIONS_ROLE, Item
from deltaguard.lanes.pending_verdicts import PendingVerdicts, VerdictWait
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
_SKETCH_BYTES = 1000  # a sketch and its lock, as JSON
_INDEX_ENTRY_BYTES = 64  # a locked conversation's id and until when, in its tenant's index


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

    def to_text(self) -> str:
        """The hashes as base64 of little-endian 32-bit words (684 characters)."""
        return base64.b64encode(struct.pack(f"<{len(self.hashes)}I", *sorted(self.hashes))).decode()

    @classmethod
    def from_text(cls, text: str) -> HistorySketch:
        raw = base64.b64decode(text)
        return cls(frozenset(struct.unpack(f"<{len(raw) // 4}I", raw)))


@dataclass(frozen=True, slots=True)
class Lock:
    """Why a conversation (or a client's new conversations) is refused, and until when."""

    categories: tuple[str, ...]
    until: float  # wall-clock seconds
    why: str


class ConversationLockout:
    """Per (tenant, conversation): the categories that refuse its next turns, how many of
    its turns were blocked on their own content, and its lock; per tenant, the sketches of
    locked histories (the newest `max_sketches`); per client key, its blocked first turns.
    All bounded like the conversation store (locks by `lock_s`), and all kept in its
    backend (what may change read from it first when replicas share it). `verdicts`: the
    monitor jobs pending per conversation, waited for as `verdict_wait` says."""

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
        max_sketches: int = defaults.MAX_LOCK_SKETCHES,
        verdict_wait: VerdictWait | None = None,
    ) -> None:
        """`max_locks`: the sketches this process holds, of every tenant (with a backend,
        those it last used; the backend holds `max_sketches` per tenant)."""
        if max_sketches < 1:
            raise ValueError(f"max_sketches must be at least 1, got {max_sketches}")
        self.block_limit = block_limit
        self.probe_categories = probe_categories
        self.lock_s = lock_s
        self.first_turn_window_s = first_turn_window_s
        self.clock = clock

        def bounded(name: str, ttl: float, encode: Any, decode: Any, **kw: Any) -> Any:
            limits = {
                "max_entries": max_conversations,
                "max_bytes": max_conversations * _ENTRY_BYTES,
                "size": lambda _: _ENTRY_BYTES,
                "fresh": True,
            }
            return StateMap(
                f"lockout/{name}",
                ttl_s=ttl,
                encode=encode,
                decode=decode,
                backend=backend,
                **{**limits, **kw},
            )

        self._flags: StateMap[tuple[str, str], frozenset[str]] = bounded(
            "flags", ttl_s, lambda v: json.dumps(sorted(v)), lambda text: frozenset(json.loads(text))
        )
        self._blocked: StateMap[tuple[str, str], tuple[int, frozenset[str]]] = bounded(
            "blocked", ttl_s, lambda v: json.dumps([v[0], sorted(v[1])]), _decode_blocked
        )
        self._locks: StateMap[tuple[str, str], Lock] = bounded("locks", lock_s, _lock_json, _lock_from_json)
        # tenant -> its locked conversations with a sketch, (id, until), oldest first; and
        # (tenant, conversation) -> the sketch and its lock (never changed: a conversation
        # locked again writes a new lock, which its index entry names by its `until`).
        self.max_sketches = max_sketches
        self._sketch_index: StateMap[str, tuple[tuple[str, float], ...]] = bounded(
            "sketch_index",
            lock_s,
            json.dumps,
            lambda text: tuple((str(c), float(u)) for c, u in json.loads(text)),
            size=lambda v: _ENTRY_BYTES + _INDEX_ENTRY_BYTES * len(v),
        )
        self._sketches: StateMap[tuple[str, str], tuple[HistorySketch, Lock]] = bounded(
            "sketches",
            lock_s,
            _sketch_json,
            _sketch_from_json,
            max_entries=max_locks,
            max_bytes=max_locks * _SKETCH_BYTES,
            size=lambda _: _SKETCH_BYTES,
            fresh=False,
        )
        self.verdicts = PendingVerdicts(verdict_wait, backend)
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
            self._keep_sketch(tenant, conversation_id, sketch, lock)
        return sorted(seen)

    def _keep_sketch(self, tenant: str, conversation_id: str, sketch: HistorySketch, lock: Lock) -> None:
        """The sketch first, then its tenant's index entry: a reader that finds the entry
        finds the sketch. The index drops what expired and keeps the newest `max_sketches`."""
        self._sketches.put((tenant, conversation_id), (sketch, lock))

        def added(old: tuple[tuple[str, float], ...] | None) -> tuple[tuple[str, float], ...]:
            now = self.clock()
            kept = [(c, until) for c, until in old or () if until > now and c != conversation_id]
            return (*kept, (conversation_id, lock.until))[-self.max_sketches :]

        self._sketch_index.update(tenant, added)  # atomic: replicas locking at once both stay

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
        now = self.clock()
        index = self._sketch_index.get(tenant) or ()
        locked = [(c, until) for c, until in reversed(index) if until > now and c != conversation_id]
        if not locked:
            return None
        shingles = _shingles(history())
        for other, until in locked:  # the newest first
            found = self._sketches.get((tenant, other))
            if found is not None and found[1].until != until:  # locked again since this copy was read
                found = self._sketches.get((tenant, other), fresh=True)
            if found is None or found[1].until != until:
                continue
            sketch, lock = found
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
    return _lock_from(json.loads(text))


def _lock_from(obj: dict[str, Any]) -> Lock:
    return Lock(tuple(obj["categories"]), float(obj["until"]), str(obj["why"]))


def _sketch_json(value: tuple[HistorySketch, Lock]) -> str:
    sketch, lock = value
    return json.dumps({"hashes": sketch.to_text(), "lock": asdict(lock)})


def _sketch_from_json(text: str) -> tuple[HistorySketch, Lock]:
    obj = json.loads(text)
    return HistorySketch.from_text(obj["hashes"]), _lock_from(obj["lock"])

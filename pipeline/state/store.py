"""Conversation state: response records, snapshots, prefix matching, eviction, rebuild.

Two bounded LRU+TTL maps:

- responses: response id -> `ResponseRecord` (the items that response added, a link to
  its parent record, and the chain value after each item). Records link to their parent
  object, not its id, so evicting an id never cuts a descendant off its history; a
  conversation's history lives as long as some descendant is indexed.
- snapshots: chain value -> `Snapshot` (every classifier's state after that prefix).
  Snapshots are the cache; records are what lets a continuation be rebuilt when its
  snapshot was evicted.

`tracker.ConversationTracker` scores on top of them. Forks come for free: snapshots
and records are immutable, so two children of one parent share it (copy-on-write).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from deltaguard import defaults
from deltaguard.errors import PreviousResponseNotFound
from deltaguard.items import Item
from deltaguard.state.backends import StateBackend
from deltaguard.state.scoring import CHAIN_ROOT, Snapshot, chain_of
from deltaguard.state.tiers import StateMap

K = TypeVar("K")
V = TypeVar("V")


class LruTtlMap(Generic[K, V]):
    """A bounded map: least recently used entries go first, entries expire after `ttl_s`.
    Given `max_bytes`, it is bounded by the entries' `size` too (an entry larger than
    `max_bytes` on its own is not kept)."""

    def __init__(
        self,
        max_entries: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_bytes: int | None = None,
        size: Callable[[K, V], int] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        if (max_bytes is None) != (size is None):
            raise ValueError("max_bytes and size go together")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.max_bytes = max_bytes
        self._size = size
        self._clock = clock
        self._data: OrderedDict[K, tuple[float, V, int]] = OrderedDict()
        self.bytes = 0
        self.evictions = 0
        self.expirations = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def get(self, key: K) -> V | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        stamp, value, size = entry
        if self._clock() - stamp > self.ttl_s:
            self.discard(key)
            self.expirations += 1
            return None
        self._data[key] = (self._clock(), value, size)
        self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        size = self._size(key, value) if self._size is not None else 0
        self.discard(key)
        self._data[key] = (self._clock(), value, size)
        self.bytes += size
        over_bytes = self.max_bytes if self.max_bytes is not None else float("inf")
        while len(self._data) > self.max_entries or self.bytes > over_bytes:
            _, (_, _, dropped) = self._data.popitem(last=False)
            self.bytes -= dropped
            self.evictions += 1

    def discard(self, key: K) -> None:
        entry = self._data.pop(key, None)
        if entry is not None:
            self.bytes -= entry[2]

    def clear(self) -> None:
        self._data.clear()
        self.bytes = 0


class ParentLink:
    """A record's parent: the record itself, or how to load it (a record read back from a
    backend resolves its parent only when its history is walked)."""

    __slots__ = ("_load", "_record")

    def __init__(
        self, record: ResponseRecord | None = None, load: Callable[[], ResponseRecord] | None = None
    ) -> None:
        self._record = record
        self._load = load

    def get(self) -> ResponseRecord | None:
        if self._record is None and self._load is not None:
            self._record = self._load()
            self._load = None
        return self._record


@dataclass(frozen=True, slots=True, eq=False)
class ResponseRecord:
    """The items one response added to a conversation (its new input, then its output)."""

    response_id: str
    conversation_id: str  # the first response's id, unless the client named it
    parent_id: str | None
    link: ParentLink = field(repr=False)
    items: tuple[Item, ...]
    chains: tuple[bytes, ...]  # chain value after each of `items`
    length: int  # items in the whole history up to and including these
    outputs: int = 0  # how many of `items`, at the end, are the model's output
    answered: bool = False  # the history holds a model item (an answer, a tool call)
    # What the response's adapters carry to its continuations (its gate verdict, tools,
    # the upstream's id): kept with the record, evicted with it, and shared by the record
    # that appends the response's output. JSON values and bytes only (records are stored
    # as JSON, `record_to_json`).
    notes: dict[str, Any] = field(default_factory=dict)
    # Estimated bytes of the whole history up to and including this record: what holding
    # it in the process costs, since a record keeps its ancestors alive.
    history_bytes: int = 0

    @property
    def parent(self) -> ResponseRecord | None:
        return self.link.get()

    @property
    def output_items(self) -> tuple[Item, ...]:
        return self.items[len(self.items) - self.outputs :]

    @property
    def chain(self) -> bytes:
        if self.chains:
            return self.chains[-1]
        return self.parent.chain if self.parent else CHAIN_ROOT

    def history(self) -> list[Item]:
        segments = []
        node: ResponseRecord | None = self
        while node is not None:
            segments.append(node.items)
            node = node.parent
        return [item for seg in reversed(segments) for item in seg]

    def positions(self) -> Iterator[tuple[ResponseRecord, int]]:
        """(record, index) of every history item, newest first."""
        node: ResponseRecord | None = self
        while node is not None:
            for i in range(len(node.items) - 1, -1, -1):
                yield node, i
            node = node.parent


def items_bytes(items: Sequence[Item]) -> int:
    """Estimated bytes items hold in the process (their text twice: canonical and raw)."""
    return sum(160 + 2 * len(i.text) + len(i.attachments) for i in items)


def _note_to_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    if isinstance(value, dict):
        return {k: _note_to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_note_to_json(v) for v in value]
    return value


def _note_from_json(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and "$bytes" in value:
            return bytes.fromhex(value["$bytes"])
        return {k: _note_from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_note_from_json(v) for v in value]
    return value


def item_to_json(item: Item) -> dict[str, Any]:
    return {
        "kind": item.kind,
        "role": item.role,
        "text": item.text,
        "digest": item.digest.hex(),
        "raw": item.raw,
        "tokens": item.tokens,
        "scored": item.scored,
        "from_client": item.from_client,
        "attachments": item.attachments,
    }


def item_from_json(obj: dict[str, Any]) -> Item:
    return Item(
        kind=obj["kind"],
        role=obj["role"],
        text=obj["text"],
        digest=bytes.fromhex(obj["digest"]),
        raw=obj["raw"],
        tokens=int(obj["tokens"]),
        scored=bool(obj["scored"]),
        from_client=bool(obj["from_client"]),
        attachments=obj["attachments"],
    )


def record_to_json(rec: ResponseRecord) -> str:
    """A record as JSON text: its own items and a reference to its parent (by id)."""
    return json.dumps(
        {
            "v": 1,
            "response_id": rec.response_id,
            "conversation_id": rec.conversation_id,
            "parent_id": rec.parent_id,
            "items": [item_to_json(i) for i in rec.items],
            "chains": [c.hex() for c in rec.chains],
            "length": rec.length,
            "outputs": rec.outputs,
            "answered": rec.answered,
            "notes": _note_to_json(rec.notes),
            "history_bytes": rec.history_bytes,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def record_from_json(text: str, load_parent: Callable[[str], ResponseRecord]) -> ResponseRecord:
    obj = json.loads(text)
    parent_id = obj["parent_id"]
    return ResponseRecord(
        response_id=obj["response_id"],
        conversation_id=obj["conversation_id"],
        parent_id=parent_id,
        link=ParentLink(load=(lambda: load_parent(parent_id)) if parent_id is not None else None),
        items=tuple(item_from_json(i) for i in obj["items"]),
        chains=tuple(bytes.fromhex(c) for c in obj["chains"]),
        length=int(obj["length"]),
        outputs=int(obj["outputs"]),
        answered=bool(obj["answered"]),
        notes=_note_from_json(obj["notes"]),
        history_bytes=int(obj["history_bytes"]),
    )


@dataclass
class StoreStats:
    hits: int = 0  # a cached snapshot covered the known history (or a resent prefix)
    misses: int = 0  # a resent history with no cached prefix: folded from empty
    rebuilds: int = 0  # a known continuation whose snapshot was evicted: refolded


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Bounds of one (lane, tenant) store in the process: entries, bytes, idle time."""

    max_responses: int = defaults.MAX_RESPONSES
    max_snapshots: int = defaults.MAX_SNAPSHOTS
    ttl_s: float = defaults.STATE_TTL_S
    # Bytes the process holds of response records (their whole histories), of snapshots
    # (their JSON form) and of each conversation index (chain values and ids), each, with
    # what holding an entry costs (`tiers.ENTRY_BYTES`); least recently used go first.
    max_bytes: int = defaults.STATE_MAX_BYTES
    # With a backend: what the process keeps of a conversation unused this long is dropped
    # from memory (the backend still has it).
    cache_ttl_s: float = defaults.STATE_CACHE_TTL_S


def _snapshot_json(snapshot: Snapshot) -> str:
    return json.dumps(snapshot.to_json(), separators=(",", ":"))


def _snapshot_from_json(text: str) -> Snapshot:
    return Snapshot.from_json(json.loads(text))


class ConversationStore:
    """Bounded response records and snapshots of one lane and tenant (module docstring),
    in the process and, given a backend, in it under `namespace`.

    Snapshots are kept under `scorer_tag` too (`Scorer.tag`, the classifiers' versions):
    a process whose models changed never resumes the states another version made (a
    restart after an upgrade, a replica not yet upgraded); it refolds the recorded history,
    which no version owns, so its verdicts are still those of a full rescore."""

    def __init__(
        self,
        limits: StoreLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        backend: StateBackend | None = None,
        namespace: str = "gate/default",
        scorer_tag: str = "",
    ) -> None:
        self.limits = limits = limits or StoreLimits()
        self.clock = clock
        self.backend = backend
        self.namespace = namespace
        self.scorer_tag = scorer_tag
        common: dict[str, Any] = {
            "ttl_s": limits.ttl_s,
            "backend": backend,
            "cache_ttl_s": limits.cache_ttl_s,
            "clock": clock,
        }
        # A shared backend's records are read from it first: another replica may have
        # appended a response's output (a guard API's output check) since this one read it.
        self.responses: StateMap[str, ResponseRecord] = StateMap(
            f"{namespace}/r",
            max_entries=limits.max_responses,
            max_bytes=limits.max_bytes,
            encode=record_to_json,
            decode=lambda text: record_from_json(text, self._parent),
            size=lambda rec: rec.history_bytes,
            group=lambda rec: f"{namespace}/c/{rec.conversation_id}",
            fresh=True,
            **common,
        )
        self.snapshots: StateMap[bytes, Snapshot] = StateMap(
            f"{namespace}/s/{scorer_tag}" if scorer_tag else f"{namespace}/s",
            max_entries=limits.max_snapshots,
            max_bytes=limits.max_bytes,
            encode=_snapshot_json,
            decode=_snapshot_from_json,
            # ~20 dicts and lists each as objects, the bulk of what the collector walks
            # in a gateway that has run a while; as text, one string.
            encoded=True,
            **common,
        )
        # The conversation each recorded history belongs to, by the chain value at its
        # end: a stateless client's resent history keeps its conversation's identity.
        # Only histories that hold a model item are anchors, so two clients whose first
        # requests are alike (one system prompt, one task) stay two conversations.
        index: dict[str, Any] = {
            "max_entries": limits.max_responses,
            "max_bytes": limits.max_bytes,
            "encode": json.dumps,
            "decode": json.loads,
            "size": len,
            **common,
        }
        self.conversations: StateMap[bytes, str] = StateMap(f"{namespace}/conv", **index)
        # The response each noted history ends (its output included), by the chain value
        # at that end: what a resent history continues (`ConversationTracker.ended_at`).
        self.ends: StateMap[bytes, str] = StateMap(f"{namespace}/end", **index)
        self.stats = StoreStats()

    def _parent(self, response_id: str) -> ResponseRecord:
        """A parent named by a record read back from the backend (it lives as long as its
        descendants: a conversation's records expire together)."""
        rec = self.responses.get(response_id, fresh=False)
        if rec is None:
            raise PreviousResponseNotFound(response_id)
        return rec

    def record(self, response_id: str) -> ResponseRecord:
        rec = self.responses.get(response_id)
        if rec is None:
            raise PreviousResponseNotFound(response_id)
        return rec

    def add_record(
        self,
        response_id: str,
        parent: ResponseRecord | None,
        items: Sequence[Item],
        chains: Sequence[bytes] | None = None,
        conversation_id: str | None = None,
    ) -> ResponseRecord:
        start = parent.chain if parent else CHAIN_ROOT
        if conversation_id is None:
            conversation_id = parent.conversation_id if parent else response_id
        rec = ResponseRecord(
            response_id=response_id,
            conversation_id=conversation_id,
            parent_id=parent.response_id if parent else None,
            link=ParentLink(parent),
            items=tuple(items),
            chains=tuple(chains if chains is not None else chain_of(items, start)),
            length=(parent.length if parent else 0) + len(items),
            answered=(parent.answered if parent else False) or any(i.role == "assistant" for i in items),
            history_bytes=(parent.history_bytes if parent else 0) + items_bytes(items),
        )
        self.responses.put(response_id, rec)
        if rec.answered:
            self.conversations.put(rec.chain, conversation_id)
        return rec

    def conversation_of(self, chains: Sequence[bytes]) -> str | None:
        """The conversation of the longest recorded prefix of a history (its chain values)."""
        for chain in reversed(chains):
            conversation = self.conversations.get(chain)
            if conversation is not None:
                return conversation
        return None

    def extend_record(
        self, response_id: str, items: Sequence[Item], notes: dict[str, Any] | None = None
    ) -> ResponseRecord:
        """Append items (the model's output) to a response, keeping its id; `notes` join
        its notes in the same write."""
        rec = self.record(response_id)
        new = ResponseRecord(
            response_id=response_id,
            conversation_id=rec.conversation_id,
            parent_id=rec.parent_id,
            link=rec.link,
            items=rec.items + tuple(items),
            chains=rec.chains + tuple(chain_of(items, rec.chain)),
            length=rec.length + len(items),
            outputs=rec.outputs + len(items),
            answered=rec.answered or bool(items),
            notes={**rec.notes, **notes} if notes else rec.notes,
            history_bytes=rec.history_bytes + items_bytes(items),
        )
        self.responses.put(response_id, new)
        if items:
            self.conversations.put(new.chain, new.conversation_id)
        return new

    def annotate(
        self, response_id: str, notes: dict[str, Any], record: ResponseRecord | None = None
    ) -> ResponseRecord:
        """Add notes to a response's record (`record`, when the caller holds it), in the
        process and in the backend."""
        rec = record if record is not None else self.record(response_id)
        rec.notes.update(notes)
        self.responses.put(response_id, rec)
        return rec

    def put_snapshot(self, snapshot: Snapshot) -> None:
        self.snapshots.put(snapshot.chain, snapshot)

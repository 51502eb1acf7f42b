"""The worker's monitor lane as pure functions over table values (no faust, no broker).

The faust agent (worker.py) reads each conversation's table value, hands a batch of
turns to `MonitorLane.score_batch` (in a thread), publishes the flags and errors it
returns, and writes back the values it returns. Keeping the scoring here makes it
testable without a broker, and keeps faust at the edge.

Table value of one conversation (JSON text; `ConversationEntry`):

    {"format": 1,
     "partition": 3,                  # turns partition the conversation lives in
     "touched_at": 1767000000.0,      # last turn, for idle expiry
     "versions": {"secrets": "1.0.0", ...},   # classifiers the snapshots were made by
     "responses": [["resp_7", SNAPSHOT], ...],  # recent response ids, oldest first
     "seen": ["resp_1", ..., "resp_7"]}        # recent response ids already applied

SNAPSHOT is `Snapshot.to_json()`: every classifier's state after the history up to
and including that response's turn. A turn continuing `previous_response_id` resumes
from that snapshot (forks: two turns may continue one parent); a turn resending its
full history resumes from the longest prefix with a snapshot (hash chain); anything
else is a `TurnError` (previous_response_not_found), never a silent pass.
`seen` makes redelivered turns (at-least-once) no-ops: their flags were published
before their state was written (see worker.py).

A turn that asks for its verdict (`TurnEvent.verdict_requested`: a gateway holds its
tool calls) gets a `VerdictEvent` whatever the verdict, and one with decision "error"
when it cannot be scored, so that the gateway need not wait for its deadline.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from deltaguard.errors import ItemError, PreviousResponseNotFound
from deltaguard.events import FlagEvent, TurnEvent, VerdictEvent
from deltaguard.kafka.records import ErrorCode, TurnError, decode_key
from deltaguard.lanes.monitor import MonitorStep, waves
from deltaguard.parsing import parse_items
from deltaguard.state.scoring import (
    Fold,
    FoldRequest,
    Scorer,
    Snapshot,
    chain_of,
    findings_json,
    longest_prefix,
)

log = logging.getLogger("deltaguard.kafka.monitor")

TABLE_FORMAT = 1


@dataclass
class ConversationEntry:
    """One conversation's table value, decoded (see module docstring)."""

    partition: int
    versions: dict[str, str]
    responses: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    touched_at: float = 0.0

    @classmethod
    def decode(cls, raw: str | bytes) -> ConversationEntry:
        obj = json.loads(raw)
        if obj.get("format") != TABLE_FORMAT:
            raise ValueError(f"unknown conversation table format {obj.get('format')!r}")
        return cls(
            partition=int(obj["partition"]),
            versions=dict(obj["versions"]),
            responses=OrderedDict((rid, snap) for rid, snap in obj["responses"]),
            seen=OrderedDict.fromkeys(obj["seen"]),
            touched_at=float(obj["touched_at"]),
        )

    def encode(self) -> str:
        # Stored as text and parsed on every read, so a value read back from the
        # changelog after a recovery is exactly the value a live worker reads.
        return json.dumps(
            {
                "format": TABLE_FORMAT,
                "partition": self.partition,
                "touched_at": self.touched_at,
                "versions": self.versions,
                "responses": [[rid, snap] for rid, snap in self.responses.items()],
                "seen": list(self.seen),
            },
            separators=(",", ":"),
            ensure_ascii=True,
        )


Entry = ConversationEntry | None


@dataclass(frozen=True, slots=True)
class IncomingTurn:
    """A turns-topic message as the agent got it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    topic: str = "deltaguard.turns"

    @property
    def source(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    conversation_id: str
    response_id: str
    flag: FlagEvent | None = None
    error: TurnError | None = None
    duplicate: bool = False
    decision: str | None = None  # None when not scored (error, duplicate)
    verdict: VerdictEvent | None = None  # for a turn that asked for it (verdict_requested)


@dataclass
class BatchResult:
    outcomes: list[TurnOutcome]
    # conversation id -> (turns partition, encoded entry) for every conversation changed
    writes: dict[str, tuple[int, str]]


@dataclass(frozen=True, slots=True)
class _Ready:
    """A turn ready to fold: its conversation's (usable) entry and the fold to run."""

    incoming: IncomingTurn
    conv: str
    event: TurnEvent
    entry: ConversationEntry
    request: FoldRequest


class MonitorLane:
    """Scores turn events delta-only against per-conversation snapshots.

    Pure with respect to its inputs: `score_batch` reads the given table values and
    returns new ones; it holds no state between calls.
    """

    def __init__(
        self,
        scorer: Scorer,
        max_responses: int = 8,
        max_seen: int = 256,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.scorer = scorer
        self.step = MonitorStep(scorer)
        self.max_responses = max_responses
        self.max_seen = max_seen
        self.clock = clock

    def score_batch(
        self, values: Mapping[str, str | bytes | None], turns: Sequence[IncomingTurn]
    ) -> BatchResult:
        """Score `turns` (each conversation's in order); `values` holds the table value of
        their conversations. The batch's turns of different conversations are folded
        together, one `Scorer.fold_many` per wave."""
        entries: dict[str, Entry] = {}
        outcomes: list[TurnOutcome | None] = [None] * len(turns)
        changed: set[str] = set()
        for wave in waves([decode_key(turn.key) or "" for turn in turns]):
            ready: list[tuple[int, _Ready]] = []
            for i in wave:
                prepared = self._prepare(turns[i], values, entries)
                if isinstance(prepared, TurnOutcome):
                    outcomes[i] = prepared
                else:
                    ready.append((i, prepared))
            for (i, turn), fold in zip(ready, self._fold(ready), strict=True):
                outcomes[i] = self._finish(turn, fold)
                if outcomes[i].error is None:
                    changed.add(turn.conv)
        writes = {}
        for conv in changed:
            entry = entries[conv]
            assert entry is not None
            writes[conv] = (entry.partition, entry.encode())
        return BatchResult([o for o in outcomes if o is not None], writes)

    # -- one turn ---------------------------------------------------------------------

    def _entry(self, conv: str, values: Mapping[str, str | bytes | None], entries: dict[str, Entry]) -> Entry:
        if conv not in entries:
            raw = values.get(conv)
            entry = None
            if raw is not None:
                try:
                    entry = ConversationEntry.decode(raw)
                except (ValueError, KeyError, TypeError):
                    log.exception("conversation %r: unreadable table value; starting it afresh", conv)
            entries[conv] = entry
        return entries[conv]

    def _prepare(
        self,
        turn: IncomingTurn,
        values: Mapping[str, str | bytes | None],
        entries: dict[str, Entry],
    ) -> TurnOutcome | _Ready:
        """The turn's fold to run, or its outcome when it is not scored (error, duplicate)."""
        key = decode_key(turn.key) or ""
        try:
            event = TurnEvent.model_validate_json(turn.value or b"")
        except (ValidationError, ValueError) as exc:
            raw = (turn.value or b"").decode("utf-8", "replace")
            return self._error(turn, "invalid_turn_event", str(exc), key, "", raw_turn=raw)
        conv = event.conversation_id
        if key != conv:
            message = f"message key {key!r} is not the conversation id {conv!r}"
            return self._error(turn, "key_mismatch", message, conv, event=event)
        entry = self._entry(conv, values, entries)
        if entry is not None and event.response_id in entry.seen:
            return TurnOutcome(conv, event.response_id, duplicate=True)
        try:
            items = parse_items(event.items, "items")
        except ItemError as exc:
            return self._error(turn, "invalid_items", str(exc), conv, event=event)
        entry = self._usable(entry, turn.partition, conv)
        entries[conv] = entry
        try:
            base, items_to_fold, chains = self._base(entry, event, items)
        except PreviousResponseNotFound as exc:
            return self._error(turn, "previous_response_not_found", str(exc), conv, event=event)
        return _Ready(turn, conv, event, entry, FoldRequest(base, items_to_fold, chains))

    def _fold(self, ready: Sequence[tuple[int, _Ready]]) -> list[Fold | Exception]:
        """The wave's folds in one call; if that fails, one by one, so that a turn a
        classifier fails on costs only its own verdict."""
        requests = [turn.request for _, turn in ready]
        try:
            return list(self.scorer.fold_many(requests))
        except Exception as exc:
            if len(requests) == 1:
                return [exc]
        out: list[Fold | Exception] = []
        for request in requests:
            try:
                out.append(self.scorer.fold_many([request])[0])
            except Exception as exc:
                out.append(exc)
        return out

    def _finish(self, turn: _Ready, fold: Fold | Exception) -> TurnOutcome:
        event = turn.event
        try:
            if isinstance(fold, Exception):
                raise fold
            outcome = self.step.judge(
                fold, conversation_id=turn.conv, response_id=event.response_id, tenant=event.tenant
            )
        except Exception as exc:  # a classifier bug must not stop the partition
            log.exception("scoring %s failed", event.response_id)
            return self._error(turn.incoming, "scoring_failed", repr(exc), turn.conv, event=event)
        self._remember(turn.entry, event.response_id, fold.after, turn.incoming.partition)
        verdict = None
        if event.verdict_requested:
            v = outcome.verdict
            verdict = VerdictEvent.build(
                conversation_id=turn.conv,
                response_id=event.response_id,
                decision=v.decision,
                turn_event_id=event.event_id,
                categories=v.flagged_categories,
                scores=v.category_scores,
                classifier_versions=self.scorer.versions,
                findings=findings_json(v.findings),
                tenant=event.tenant,
            )
        return TurnOutcome(
            turn.conv,
            event.response_id,
            flag=outcome.flag,
            decision=outcome.verdict.decision,
            verdict=verdict,
        )

    def _usable(self, entry: ConversationEntry | None, partition: int, conv: str) -> ConversationEntry:
        versions = self.scorer.versions
        if entry is None:
            return ConversationEntry(partition=partition, versions=versions)
        if entry.versions != versions:
            # Snapshots of other classifiers (or versions) cannot be resumed: drop them;
            # continuations of them then fail loudly instead of scoring half a history.
            log.warning("conversation %r: classifiers changed %s -> %s", conv, entry.versions, versions)
            entry.responses.clear()
            entry.versions = versions
        return entry

    def _base(
        self, entry: ConversationEntry, event: TurnEvent, items: list[Any]
    ) -> tuple[Snapshot, list[Any], list[bytes]]:
        """The snapshot to resume from, the items to fold after it, and their chain values."""
        if event.full_history:
            chains = chain_of(items)
            by_chain = {snap["chain"]: snap for snap in entry.responses.values()}
            k, base = longest_prefix(
                chains,
                lambda chain: Snapshot.from_json(by_chain[chain.hex()]) if chain.hex() in by_chain else None,
            )
            return base or self.scorer.empty(), items[k:], chains[k:]
        if event.previous_response_id is None:
            base = self.scorer.empty()
        else:
            snap = entry.responses.get(event.previous_response_id)
            if snap is None:
                raise PreviousResponseNotFound(event.previous_response_id)
            entry.responses.move_to_end(event.previous_response_id)
            base = Snapshot.from_json(snap)
        return base, items, chain_of(items, base.chain)

    def _remember(self, entry: ConversationEntry, response_id: str, after: Snapshot, partition: int) -> None:
        entry.responses[response_id] = after.to_json()
        entry.responses.move_to_end(response_id)
        while len(entry.responses) > self.max_responses:
            entry.responses.popitem(last=False)
        entry.seen[response_id] = None
        while len(entry.seen) > self.max_seen:
            entry.seen.popitem(last=False)
        entry.partition = partition
        entry.touched_at = self.clock()

    def _error(
        self,
        turn: IncomingTurn,
        code: ErrorCode,
        message: str,
        conv: str,
        response_id: str = "",
        event: TurnEvent | None = None,
        raw_turn: str | None = None,
    ) -> TurnOutcome:
        error = TurnError.build(
            code=code,
            message=message,
            conversation_id=conv,
            response_id=event.response_id if event else response_id,
            previous_response_id=event.previous_response_id if event else None,
            turn_event_id=event.event_id if event else None,
            source=turn.source,
            turn=event.model_dump(mode="json") if event else raw_turn,
        )
        log.error("turn %s not scored: %s: %s", error.response_id or turn.source, code, message)
        verdict = None
        if event is not None and event.verdict_requested:
            verdict = VerdictEvent.build(
                conversation_id=event.conversation_id,
                response_id=event.response_id,
                decision="error",
                turn_event_id=event.event_id,
                error=code,
                tenant=event.tenant,
            )
        return TurnOutcome(conv, error.response_id, error=error, verdict=verdict)


def expired(raw: str | bytes, now: float, ttl_s: float) -> int | None:
    """The partition of a conversation idle for more than `ttl_s`, else None."""
    try:
        entry = ConversationEntry.decode(raw)
    except (ValueError, KeyError, TypeError):
        return None
    return entry.partition if now - entry.touched_at > ttl_s else None

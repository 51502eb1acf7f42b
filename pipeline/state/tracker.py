"""Delta-only scoring of conversations on top of a `ConversationStore`.

A turn that continues a response resumes from the snapshot at the end of that
response's history: the longest prefix of the history that has a snapshot is found
(walking back from its end), and only what follows is folded. A snapshot that was
evicted is rebuilt from the records.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deltaguard.items import Item
from deltaguard.state.scoring import CHAIN_ROOT, Fold, FoldRequest, Scorer, Snapshot, chain_of, longest_prefix
from deltaguard.state.store import ConversationStore, ResponseRecord


@dataclass(frozen=True, slots=True)
class TrackedTurn:
    """The outcome of scoring one turn: the fold of its new items, and any rebuild."""

    fold: Fold
    record: ResponseRecord
    rebuild: Fold | None = None  # history refolded because its snapshot was evicted


@dataclass(frozen=True, slots=True)
class PendingTurn:
    """A turn prepared for scoring: the fold to run (`request`) and what to record after."""

    request: FoldRequest
    response_id: str
    parent: ResponseRecord | None
    items: Sequence[Item]  # the turn's new items (or the whole resent history)
    chains: Sequence[bytes]
    conversation_id: str | None
    rebuild: Fold | None = None  # history refolded because its snapshot was evicted


class ConversationTracker:
    """Scores conversations delta-only on top of a `ConversationStore`.

    Thread-safe: store lookups and updates happen under one lock; classifier folds,
    which are pure, run outside it, so turns of different conversations score in
    parallel.
    """

    def __init__(self, scorer: Scorer, store: ConversationStore | None = None) -> None:
        if store is not None and store.scorer_tag not in ("", scorer.tag):
            raise ValueError(
                f"the store keeps snapshots of scorer {store.scorer_tag}, not of this one ({scorer.tag})"
            )
        self.scorer = scorer
        self.store = store if store is not None else ConversationStore(scorer_tag=scorer.tag)
        self._lock = threading.Lock()
        # Histories being folded up to their end (`_snapshot_at`), by chain: the post-inference
        # lane scoring an answer and the next turn resuming after it wait for one fold.
        self._folding: dict[bytes, threading.Event] = {}

    def _snapshot_at(self, rec: ResponseRecord | None) -> tuple[Snapshot, Fold | None]:
        """The snapshot at the end of `rec`'s history, rebuilt from history if evicted.

        Walks back to the newest cached snapshot in the history and folds what follows
        (from the empty state when none is cached). The result is cached again. While one
        thread folds a history, another that needs its end waits and takes the snapshot
        (its fold is then None): an answer is folded once, whether the post-inference lane
        or the next turn gets there first.
        """
        if rec is None:
            return self.scorer.empty(), None
        while True:
            with self._lock:
                base = self.store.snapshots.get(rec.chain)
                if base is not None:
                    self.store.stats.hits += 1
                    return base, None
                folding = self._folding.get(rec.chain)
                if folding is None:
                    self._folding[rec.chain] = threading.Event()
            if folding is None:
                break
            folding.wait()
        try:
            return self._fold_to_end(rec)
        finally:
            with self._lock:
                self._folding.pop(rec.chain).set()

    def _fold_to_end(self, rec: ResponseRecord) -> tuple[Snapshot, Fold | None]:
        """`_snapshot_at`'s fold, by the one thread that makes it."""
        pending: list[Item] = []
        pending_chains: list[bytes] = []
        with self._lock:
            snapshots = self.store.snapshots
            base = None
            for node, i in rec.positions():
                base = snapshots.get(node.chains[i])
                if base is not None:
                    break
                pending.append(node.items[i])
                pending_chains.append(node.chains[i])
            # Output appended after the turn was scored is expected to be pending;
            # anything more means the snapshot had been evicted.
            if len(pending) <= rec.outputs and base is not None:
                self.store.stats.hits += 1
            else:
                self.store.stats.rebuilds += 1
        if not pending and base is not None:  # kept meanwhile by a turn that ends there
            return base, None
        if base is None:
            base = self.scorer.empty()
        pending.reverse()
        pending_chains.reverse()
        fold = self.scorer.fold(base, pending, chains=pending_chains)
        with self._lock:
            self.store.put_snapshot(fold.after)
        return fold.after, fold

    def catch_up(self, rec: ResponseRecord) -> tuple[Snapshot, Fold | None]:
        """The snapshot at the end of `rec`'s history, where `rec` is another lane's record
        of the conversation (chain values are the same in every lane): for a lane that
        keeps only snapshots, the newest one it kept along that history (the empty state
        when none is), with the items after it folded and the result kept. The fold is
        None when the snapshot at the end was kept already.

        The walk reads the store without the tracker's lock (its maps are thread-safe): a
        shared backend's round trips never hold up the lane's other conversations."""
        pending: list[Item] = []
        pending_chains: list[bytes] = []
        base = None
        for node, i in rec.positions():
            base = self.store.snapshots.get(node.chains[i])
            if base is not None:
                break
            pending.append(node.items[i])
            pending_chains.append(node.chains[i])
        with self._lock:
            if base is None:
                self.store.stats.misses += 1
            else:
                self.store.stats.hits += 1
        if not pending:
            return base if base is not None else self.scorer.empty(), None
        pending.reverse()
        pending_chains.reverse()
        fold = self.scorer.fold(
            base if base is not None else self.scorer.empty(), pending, chains=pending_chains
        )
        with self._lock:
            self.store.put_snapshot(fold.after)
        return fold.after, fold

    def record(self, response_id: str) -> ResponseRecord:
        """The response's record; `PreviousResponseNotFound` when unknown or evicted."""
        with self._lock:
            return self.store.record(response_id)

    def score_turn(
        self,
        response_id: str,
        new_items: Sequence[Item],
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
    ) -> TrackedTurn:
        """Score a turn that continues `previous_response_id` with `new_items`.

        Only `new_items` are scored when the previous response's snapshot is cached.
        Raises `PreviousResponseNotFound` when the previous response is unknown or
        its record expired, rather than scoring the turn without its history.
        """
        return self.score_now(
            self.prepare_turn(response_id, new_items, previous_response_id, conversation_id)
        )

    def score_now(self, pending: PendingTurn) -> TrackedTurn:
        """Fold a prepared turn alone and record it."""
        return self.commit(pending, self.scorer.fold_many([pending.request])[0])

    def prepare_turn(
        self,
        response_id: str,
        new_items: Sequence[Item],
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
    ) -> PendingTurn:
        """What `score_turn` folds, without folding it: `commit` records the fold.

        Turns of different conversations prepared together can then be folded in one
        `Scorer.fold_many` (the monitor lane batches them). Two turns of one conversation
        cannot: the second resumes from the first's snapshot."""
        parent = self.record(previous_response_id) if previous_response_id else None
        chains = chain_of(new_items, parent.chain if parent else CHAIN_ROOT)
        # Items resent after the previous response that an earlier turn from the same
        # point already scored (a client that names the same previous response on every
        # step of a turn) are found by the chain and not scored again.
        with self._lock:
            k, known = longest_prefix(chains, self.store.snapshots.get)
        if known is not None:
            base, rebuild = known, None
        else:
            base, rebuild = self._snapshot_at(parent)
        return PendingTurn(
            FoldRequest(base, new_items[k:], chains[k:]),
            response_id,
            parent,
            new_items,
            chains,
            conversation_id,
            rebuild,
        )

    def commit(self, pending: PendingTurn, fold: Fold) -> TrackedTurn:
        """Record a prepared turn with its fold (`fold_many` of its request)."""
        with self._lock:
            self.store.put_snapshot(fold.after)
            rec = self.store.add_record(
                pending.response_id, pending.parent, pending.items, pending.chains, pending.conversation_id
            )
        return TrackedTurn(fold, rec, pending.rebuild)

    def append_output(self, response_id: str, output_items: Sequence[Item]) -> ResponseRecord:
        """Append a response's output to its history, unscored (cheap: no classifier runs).

        Done before the response is returned, so a continuation that arrives at once
        already sees the output in its history; `score_pending` scores it later.
        """
        with self._lock:
            return self.store.extend_record(response_id, output_items)

    def finish(
        self, response_id: str, output_items: Sequence[Item], notes: dict[str, Any], *, index: bool = False
    ) -> ResponseRecord:
        """A response's output joins its history (`append_output`) and `notes` its record,
        in one write; `index`: `ended_at` finds it by its history."""
        with self._lock:
            rec = self.store.extend_record(response_id, output_items, notes)
            if index:
                self.store.ends.put(rec.chain, response_id)
        return rec

    def annotate(
        self,
        response_id: str,
        notes: dict[str, Any],
        *,
        index: bool = False,
        record: ResponseRecord | None = None,
    ) -> ResponseRecord:
        """Add `notes` to a response's record (`record`: the caller holds it); `index`:
        `ended_at` finds it by its history."""
        with self._lock:
            rec = self.store.annotate(response_id, notes, record)
            if index:
                self.store.ends.put(rec.chain, response_id)
        return rec

    def ended_at(self, items: Sequence[Item]) -> tuple[ResponseRecord | None, int]:
        """The indexed response whose whole history is the longest prefix of `items`, and
        that prefix's length ((None, 0) when there is none)."""
        chains = chain_of(items)
        with self._lock:
            for k in range(len(chains), 0, -1):
                response_id = self.store.ends.get(chains[k - 1])
                rec = self.store.responses.get(response_id) if response_id is not None else None
                if rec is not None:
                    return rec, k
        return None, 0

    def score_pending(self, response_id: str) -> TrackedTurn:
        """Score what the response's history has beyond its newest snapshot (its output)."""
        rec = self.record(response_id)
        base, fold = self._snapshot_at(rec)
        return TrackedTurn(fold if fold is not None else self.scorer.fold(base, []), rec)

    def score_output(self, response_id: str, output_items: Sequence[Item]) -> TrackedTurn:
        """Append a response's output items to its history and score them."""
        self.append_output(response_id, output_items)
        return self.score_pending(response_id)

    def score_history(
        self, response_id: str, items: Sequence[Item], conversation_id: str | None = None
    ) -> TrackedTurn:
        """Score a full history resent by a stateless client: only the unseen suffix.

        The longest prefix whose snapshot is cached is found through the hash chain.
        """
        return self.score_now(self.prepare_history(response_id, items, conversation_id))

    def prepare_history(
        self, response_id: str, items: Sequence[Item], conversation_id: str | None = None
    ) -> PendingTurn:
        """What `score_history` folds, without folding it (see `prepare_turn`)."""
        chains = chain_of(items)
        with self._lock:
            if conversation_id is None:
                conversation_id = self.store.conversation_of(chains)
            k, base = longest_prefix(chains, self.store.snapshots.get)
            if base is None:
                self.store.stats.misses += 1
            else:
                self.store.stats.hits += 1
        if base is None:
            base = self.scorer.empty()
        return PendingTurn(
            FoldRequest(base, items[k:], chains[k:]), response_id, None, items, chains, conversation_id
        )

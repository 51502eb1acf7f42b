"""Memory of the conversation state store, per snapshot and per response record.

    python -m eval.state_memory --conversations 2000 --turns 10

Runs agent conversations through a `ConversationTracker` with the default classifiers
and measures, with tracemalloc, what the store holds: snapshots (classifier states) and
response records (the items themselves, which rebuilds need). Prints bytes per entry,
so the LRU bounds (`StoreLimits`) translate into memory, and what the store costs the
garbage collector: the objects a full collection walks with everything held, and its time.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from deltaguard.state.loading import build_scorer
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import parse_conversation


def drive(tracker: ConversationTracker, convs: list[Any], on_turn: Callable[[], None] = lambda: None) -> None:
    """Every conversation through the tracker, turn by turn: its input, then its output."""
    for conv in convs:
        prev = None
        for t, turn in enumerate(conv.turns):
            rid = f"{conv.id}#{t}"
            tracker.score_turn(rid, turn.input, prev)
            tracker.score_output(rid, turn.output)
            prev = rid
            on_turn()


def collector_cost(fill: Callable[[], ConversationStore]) -> dict[str, float]:
    """Objects a full collection walks beyond what was there before `fill` (the rest
    frozen, as `deltaguard serve` freezes its startup heap), and its time (best of 3)."""
    gc.collect()
    gc.freeze()
    try:
        store = fill()
        gc.collect()
        walked = len(gc.get_objects())
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            gc.collect()
            best = min(best, time.perf_counter() - t)
        del store
    finally:
        gc.unfreeze()
    return {"tracked_objects": walked, "full_collection_ms": round(best * 1000, 1)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--conversations", type=int, default=2000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--tool-tokens", type=int, default=200)
    args = ap.parse_args(argv)
    scorer = build_scorer()
    convs = [
        parse_conversation(agent_rollout(f"c{i}", args.turns, args.tool_tokens, seed=i), "<gen>", i)
        for i in range(args.conversations)
    ]
    item_bytes = sum(len(json.dumps(i.raw)) for c in convs for t in c.turns for i in (*t.input, *t.output))

    def run(keep_records: bool) -> tuple[int, ConversationStore]:
        store = ConversationStore(StoreLimits(max_responses=10**7, max_snapshots=10**7))
        tracker = ConversationTracker(scorer, store)
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        drive(tracker, convs)
        if not keep_records:
            store.responses.clear()
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        return used, store

    snap_only, store = run(keep_records=False)
    both, store2 = run(keep_records=True)
    n_snap = len(store.snapshots)
    n_resp = len(store2.responses)
    per_snapshot = snap_only / n_snap
    per_record = (both - snap_only) / n_resp
    del store, store2  # the collector is measured on one store: records and snapshots
    collector = collector_cost(lambda: run(keep_records=True)[1])
    print(
        json.dumps(
            {
                "conversations": args.conversations,
                "turns": args.turns,
                "snapshots": n_snap,
                "bytes_per_snapshot": round(per_snapshot),
                "responses": n_resp,
                "bytes_per_response_record_excluding_item_payloads": round(per_record),
                "item_json_bytes_total": item_bytes,
                "default_limits": {
                    "max_snapshots": StoreLimits().max_snapshots,
                    "max_responses": StoreLimits().max_responses,
                    "ttl_s": StoreLimits().ttl_s,
                },
                "collector": collector,
                "snapshot_memory_at_default_limit_mb": round(
                    per_snapshot * StoreLimits().max_snapshots / 1e6, 1
                ),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

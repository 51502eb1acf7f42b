"""Monitor-lane batching across conversations: `python -m eval.bench_monitor_batch`.

The monitor lane folds the jobs queued behind the one it takes in one
`Scorer.fold_many` (pipeline/lanes/stage.py; the Kafka worker does the same per batch), so
the detector scores several conversations' new items in shared onnxruntime calls. This
measures what that saves: CPU ms per turn of the monitor scorer (the detector, on one
onnxruntime thread, item memo off), folding N conversations' turns in one `fold_many`
against N folds one at a time, interleaved batch by batch so that both see the same load.

Each turn is one new item of a conversation, drawn from the detection corpus' test split
(training/lib/detection_data.py): user messages (benign and attacks) and tool outputs or
documents. The detector runs unscreened too (`--no-screen` rows), since its screen clears
most benign items before the model runs. Writes eval/out/bench_monitor_batch.md.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from deltaguard.classifiers.encoder import EncoderClassifier
from deltaguard.classifiers.registry import load_classifiers
from deltaguard.items import Item
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import FoldRequest, Scorer
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "bench_monitor_batch.md"
SIZES = (4, 16, 32)
TURNS = 96  # turns per case: 24 batches of 4, 3 of 32


def corpus_items(channel: str, n: int) -> list[Item]:
    """A fixed sample of test-split rows of one channel kind, half attacks."""
    from training.lib import detector_spec as spec
    from training.lib.detector_rows import load_rows

    indirect = channel == "tool"
    rows = [
        r
        for r in load_rows()
        if r["split"] == "test" and (r["channel"] in spec.INDIRECT_CHANNELS) == indirect
    ]
    rng = random.Random(11)
    by_label = {label: [r for r in rows if (r["label"] == "benign") == label] for label in (True, False)}
    picked = [r for label in (True, False) for r in rng.sample(by_label[label], n // 2)]
    rng.shuffle(picked)
    if indirect:
        return [
            parse_item({"type": "function_call_output", "call_id": "c", "output": r["text"]}) for r in picked
        ]
    return [parse_item({"role": "user", "content": r["text"]}) for r in picked]


def measure(scorer: Scorer, items: list[Item], size: int, repeat: int) -> dict[str, float]:
    """CPU ms per turn (total over all turns, best of `repeat` passes), batched and one at
    a time; every N folds the same turns, so the rows of one set compare across N."""
    batches = [items[i : i + size] for i in range(0, len(items), size)]
    empty = scorer.empty()
    batched, alone = [], []
    for _ in range(repeat):
        spent = {"batched": 0.0, "alone": 0.0}
        for batch in batches:
            requests = [FoldRequest(empty, [item]) for item in batch]
            t0 = time.thread_time()
            scorer.fold_many(requests)
            spent["batched"] += time.thread_time() - t0
            t0 = time.thread_time()
            for request in requests:
                scorer.fold_many([request])
            spent["alone"] += time.thread_time() - t0
        batched.append(spent["batched"] * 1e3 / len(items))
        alone.append(spent["alone"] * 1e3 / len(items))
    b, a = min(batched), min(alone)
    return {"batched_ms": b, "alone_ms": a, "ratio": a / b}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    loaded = load_classifiers()
    screened = next(c for c in loaded if c.name == "detector")
    assert isinstance(screened, EncoderClassifier)
    screened = screened.without_memo()
    unscreened = EncoderClassifier(artifact="detector", screen=False, memo_items=0).share(screened)
    sets = {"user messages": corpus_items("user", TURNS), "tool outputs": corpus_items("tool", TURNS)}
    lines = [
        "# Monitor lane: turns of several conversations folded together",
        "",
        "`python -m eval.bench_monitor_batch`: CPU ms per turn of the detector (one onnxruntime "
        "thread, memo off), N conversations' new items in one `Scorer.fold_many` against N folds "
        f"one at a time, interleaved batch by batch: total CPU over the same {TURNS} turns for "
        f"every N (half benign, half attacks, detection corpus test split), best of {args.repeat} "
        "passes.",
        "",
        "| items | detector | N | batched ms/turn | one at a time ms/turn | one at a time / batched |",
        "|---|---|---|---|---|---|",
    ]
    for set_name, items in sets.items():
        for label, clf in (("screened", screened), ("unscreened", unscreened)):
            scorer = Scorer([clf])
            scorer.fold_many([FoldRequest(scorer.empty(), items[:8])])  # warm the session
            for size in SIZES:
                r = measure(scorer, items, size, args.repeat)
                row = (
                    f"| {set_name} | {label} | {size} | {r['batched_ms']:.1f} | {r['alone_ms']:.1f} "
                    f"| {r['ratio']:.2f}x |"
                )
                lines.append(row)
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

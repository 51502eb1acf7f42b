"""Monitor-lane CPU per 1,000-token tool output: the detector and the frozen encoder side by side.

`python -m eval.monitor_cost` folds the tool outputs of eval/gate_cost.py (rollout tool
outputs of about 1,000 tokens, one per update, as an agent turn's delta) through the
default monitor lane (the fine-tuned detector) and the opt-in frozen encoder, interleaved
item by item, on one onnxruntime thread, with the item memo off (every text is new work).
CPU time of this thread, p50 and p95. The target is <= 60 ms per 1,000-token delta on one
core (one core then keeps up with >= 15 agent turns/s). Writes eval/out/monitor_cost.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from deltaguard.classifiers.encoder import EncoderClassifier
from eval.gate_cost import measure

OUT = Path(__file__).resolve().parent / "out" / "monitor_cost.md"
TEXTS = 100
REPEAT = 3
BUDGET_MS = 60.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=TEXTS)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    lanes = {
        name: [EncoderClassifier(threads=1, memo_items=0, artifact=name).load()]
        for name in ("detector", "encoder")
    }
    times = measure(lanes, args.texts, args.repeat)
    lines = [
        "# Monitor-lane CPU per 1,000-token tool output",
        "",
        f"`python -m eval.monitor_cost` ({args.texts} rollout tool outputs x {args.repeat}, one per update, "
        f"interleaved; one onnxruntime thread, item memo off; CPU ms; budget {BUDGET_MS:.0f} ms)",
        "",
        "| classifier | p50 | p95 | within budget (p50) |",
        "|---|---|---|---|",
    ]
    for name, by in times.items():
        p50, p95 = statistics.median(by["lane"]), float(np.percentile(by["lane"], 95))
        lines.append(f"| {name} | {p50:.1f} | {p95:.1f} | {'yes' if p50 <= BUDGET_MS else 'no'} |")
    report = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report, encoding="utf-8")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Gate-lane CPU per 1,000-token tool output, today's gate and earlier gates side by side,
and the provenance sketch folded beside inference.

`python -m eval.gate_cost` folds the same pipeline/tools/rollouts.py tool outputs (about
1,000 tokens each, or `--tokens`, one per update, as an agent turn's delta) through every
gate-lane classifier of the default set, and through the same set with the lexical view on
lexical-v6, lexical-v4, lexical-v3 and lexical-v2, interleaved item by item so that all see
the same machine load (lexical-v5 and later read each tool output piece by piece as well as
whole; in reading 2, as the default serves lexical-v6 now, short ones too). The
"actions" lane's classifiers (the provenance sketch: folded beside inference, awaited only
by the action check when the model acts, never by the request) fold the same items in the
same loop, reported apart, with what the default gate cost per item when it folded the
sketch too. CPU time of this thread (`time.thread_time`), p50 and p95 per classifier and
for the lane. Writes eval/out/gate_cost.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from deltaguard.classifiers.base import Classifier
from deltaguard.classifiers.lexical import SCORED_ROLES, LexicalClassifier
from deltaguard.classifiers.registry import DEFAULT_NAMES, load_classifiers, model_thresholds
from deltaguard.classifiers.scaled import ThresholdScaled
from deltaguard.parsing import parse_item
from deltaguard.tools.rollouts import tool_output
from eval.detection_eval import entry_of
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "gate_cost.md"
TEXTS = 300
TOKENS = 1000  # per tool output (`--tokens`: short outputs cost more per token)
REPEAT = 3
BESIDE = "sketch, beside inference"


def gate_on(default: list[Classifier], artifact_file: str, reading: int | None = None) -> list[Classifier]:
    """The default gate with its lexical view served by another lexical artifact (in another
    `reading` of classifiers/segments.py, if given)."""
    entry = entry_of(artifact_file)
    roles = SCORED_ROLES - {"user"}  # as in the default set: conversation judges user messages
    view = LexicalClassifier(roles=roles, artifact=entry, reading=reading).load()
    return [ThresholdScaled(view, model_thresholds(entry)) if c.name == "lexical" else c for c in default]


def measure(
    gates: dict[str, list[Classifier]], texts: int, repeat: int, tokens: int = TOKENS
) -> dict[str, dict[str, list[float]]]:
    items = [
        parse_item(
            {"type": "function_call_output", "call_id": "c", "output": tool_output(random.Random(i), tokens)}
        )
        for i in range(texts)
    ]
    times: dict[str, dict[str, list[float]]] = {
        g: {c.name: [] for c in cs} | {"lane": []} for g, cs in gates.items()
    }
    order = list(gates.items())
    for _ in range(repeat):
        for k, item in enumerate(items):
            # Each item's first gate pays for what the others then find cached (the item's
            # normalised views): the order turns, so that no gate is always first.
            for gate, classifiers in order[k % len(order) :] + order[: k % len(order)]:
                total = 0.0
                for clf in classifiers:
                    state = clf.initial_state()
                    t0 = time.thread_time()
                    clf.update(state, [item])
                    dt = (time.thread_time() - t0) * 1e3
                    times[gate][clf.name].append(dt)
                    total += dt
                times[gate]["lane"].append(total)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=TEXTS)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--tokens", type=int, default=TOKENS, help="tokens per tool output")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    loaded = load_classifiers(DEFAULT_NAMES)
    default = [c for c in loaded if c.lane == "gate"]
    beside = [c for c in loaded if c.lane == "actions"]
    version = next(c for c in default if c.name == "lexical").inner.version
    key = f"default (lexical view: lexical-v{version})"
    gates = {
        key: default,
        "lexical view on lexical-v6, reading 1": gate_on(default, "lexical-v6.npz", reading=1),
        "lexical view on lexical-v4": gate_on(default, "lexical-v4.npz"),
        "lexical view on lexical-v3": gate_on(default, "lexical-v3.npz"),
        "lexical view on lexical-v2": gate_on(default, "lexical-v2.npz"),
        BESIDE: beside,
    }
    times = measure(gates, args.texts, args.repeat, args.tokens)
    names = [*(c.name for c in default), "lane"]
    lines = [
        f"# Gate-lane CPU per {args.tokens:,}-token tool output",
        "",
        f"`python -m eval.gate_cost{'' if args.tokens == TOKENS else f' --tokens {args.tokens}'}` "
        f"({args.texts} rollout tool outputs x {args.repeat}, one per update, "
        "interleaved; CPU ms, p50 / p95)",
        "",
        "| gate | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for gate, by in times.items():
        if gate != BESIDE:
            lines.append(f"| {gate} | " + " | ".join(_cell(by[n]) for n in names) + " |")
    # Per item, in the same loop: what the default gate cost when it folded the sketch too.
    before = [g + b for g, b in zip(times[key]["lane"], times[BESIDE]["lane"], strict=True)]
    lines += [
        "",
        'Beside inference (the "actions" lane: no request waits for it; the action check awaits it '
        "only when the model acts), the same items in the same loop:",
        "",
        "| | " + " | ".join(c.name for c in beside) + f" | {key} with the sketch on the gate |",
        "|---|" + "---|" * (len(beside) + 1),
        f"| {BESIDE} | " + " | ".join(_cell(times[BESIDE][c.name]) for c in beside) + f" | {_cell(before)} |",
    ]
    write_report(args.out, lines)
    return 0


def _cell(ms: list[float]) -> str:
    return f"{statistics.median(ms):.3f} / {np.percentile(ms, 95):.3f}"


if __name__ == "__main__":
    sys.exit(main())

"""Gate-lane CPU per 1,000-token tool output, today's gate and earlier gates side by side,
and the provenance sketch folded beside inference.

`python -m eval.gate_cost` folds the same pipeline/tools/rollouts.py tool outputs (about
1,000 tokens each, or `--tokens`, one per update, as an agent turn's delta) through every
gate-lane classifier of the default set, and through the same set with the lexical view on
lexical-v6 in earlier readings, lexical-v4, lexical-v3 and lexical-v2, interleaved item by
item so that all see the same machine load (lexical-v5 and later read each tool output piece
by piece as well as whole; in reading 2, short ones too; in reading 3, a tool output over
2,000 characters by its pieces alone; in reading 4, as the default serves lexical-v6 now,
also each sentence of hard-wrapped prose that a line break cuts). The
"actions" lane's classifiers (the provenance sketch: folded beside inference, awaited only
by the action check when the model acts, never by the request) fold the same items in the
same loop, reported apart, with what the default gate cost per item when it folded the
sketch too. CPU time of this thread (`time.thread_time`), p50 and p95 per classifier and
for the lane. Then the default gate and the gate in reading 3 side by side on tool outputs of
the real benign agent conversations (eval/agent_traffic.py's test split, `--real` of them, of
every length), as CPU ms per 1,000 tokens over them all: text no one here wrote, as agents
read it. Writes eval/out/gate_cost.md.
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
from deltaguard.items import Item
from deltaguard.tools.rollouts import tool_output
from eval.agent_traffic import refuse_missing_repositories
from eval.detection_eval import entry_of
from eval.monitor_cost import agent_traffic_items, tool_item
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "gate_cost.md"
TEXTS = 300
TOKENS = 1000  # per tool output (`--tokens`: short outputs cost more per token)
REPEAT = 3
BESIDE = "sketch, beside inference"
REAL = 300  # real agent tool outputs
BUDGET_MS = 1.0  # per 1,000-token delta
READING_3 = "lexical view on lexical-v6, reading 3"  # the default before reading 4, on real text too
READING_2 = "lexical view on lexical-v6, reading 2"


def gate_on(default: list[Classifier], artifact_file: str, reading: int | None = None) -> list[Classifier]:
    """The default gate with its lexical view served by another lexical artifact (in another
    `reading` of classifiers/segments.py, if given)."""
    entry = entry_of(artifact_file)
    roles = SCORED_ROLES - {"user"}  # as in the default set: conversation judges user messages
    view = LexicalClassifier(roles=roles, artifact=entry, reading=reading).load()
    return [ThresholdScaled(view, model_thresholds(entry)) if c.name == "lexical" else c for c in default]


def measure(
    gates: dict[str, list[Classifier]], items: list[Item], repeat: int
) -> dict[str, dict[str, list[float]]]:
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


def real_traffic(gates: dict[str, list[Classifier]], n: int, repeat: int) -> list[str]:
    """The gates on real agent tool outputs, which come in every length, interleaved: CPU per
    1,000 tokens over them all, per output of 500-2,000 tokens, and a least-squares split
    of each output's cost into a fixed part and a part per 1,000 tokens."""
    items = agent_traffic_items(n)
    times = measure(gates, items, repeat)
    tokens = np.array([i.tokens for i in items] * repeat, dtype=float)
    names = [*(c.name for c in next(iter(gates.values()))), "lane"]
    mid = (tokens >= 500) & (tokens <= 2000)
    lines = [
        "",
        f"## Real agent tool outputs ({len(items)} of eval/agent_traffic.py's test split, "
        f"{tokens.mean():.0f} tokens on average, x {repeat})",
        "",
        f"CPU ms per 1,000 tokens over them all (budget {BUDGET_MS:g} ms per 1,000-token delta); "
        f"lane p50 over the outputs of 500-2,000 tokens ({int(mid.sum()) // repeat}); a least-squares "
        "split of each output's lane cost into a part per output and a part per 1,000 tokens:",
        "",
        "| gate | " + " | ".join(names) + " | lane p50, 500-2,000 tokens | per output + per 1,000 tokens |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for gate, lane in times.items():
        per = {name: sum(lane[name]) / tokens.sum() * 1000 for name in names}
        ms = np.array(lane["lane"])
        design = np.stack([np.ones_like(tokens), tokens], axis=1)
        fixed, per_token = np.linalg.lstsq(design, ms, rcond=None)[0]
        p50 = statistics.median(ms[mid] / tokens[mid] * 1000)
        split = f"{fixed:.3f} + {per_token * 1000:.3f}"
        cells = [*(f"{per[name]:.3f}" for name in names), f"{p50:.3f}", split]
        lines.append(f"| {gate} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=TEXTS)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--tokens", type=int, default=TOKENS, help="tokens per tool output")
    parser.add_argument("--real", type=int, default=REAL, help="real agent tool outputs timed")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="time real tool outputs even when repositories the real-text lock pins are not fetched here",
    )
    args = parser.parse_args(argv)
    if args.real:
        refuse_missing_repositories(parser, args.allow_missing)
    loaded = load_classifiers(DEFAULT_NAMES)
    default = [c for c in loaded if c.lane == "gate"]
    beside = [c for c in loaded if c.lane == "actions"]
    version = next(c for c in default if c.name == "lexical").inner.version
    key = f"default (lexical view: lexical-v{version})"
    gates = {
        key: default,
        READING_3: gate_on(default, "lexical-v6.npz", reading=3),
        READING_2: gate_on(default, "lexical-v6.npz", reading=2),
        "lexical view on lexical-v6, reading 1": gate_on(default, "lexical-v6.npz", reading=1),
        "lexical view on lexical-v4": gate_on(default, "lexical-v4.npz"),
        "lexical view on lexical-v3": gate_on(default, "lexical-v3.npz"),
        "lexical view on lexical-v2": gate_on(default, "lexical-v2.npz"),
        BESIDE: beside,
    }
    rollouts = [tool_item(tool_output(random.Random(i), args.tokens)) for i in range(args.texts)]
    times = measure(gates, rollouts, args.repeat)
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
    lines += real_traffic({key: default, READING_3: gates[READING_3]}, args.real, args.repeat)
    write_report(args.out, lines)
    return 0


def _cell(ms: list[float]) -> str:
    return f"{statistics.median(ms):.3f} / {np.percentile(ms, 95):.3f}"


if __name__ == "__main__":
    sys.exit(main())

"""Monitor-lane CPU per 1,000-token delta: the detector with its screens, with its item screen
only and with neither, the directives view, the notes model with and without its paragraph
screen, and the frozen encoder, side by side.

`python -m eval.monitor_cost` folds three sets of tool outputs, one per update (an agent
turn's delta), through each classifier, interleaved item by item so that all see the same
machine load, on one onnxruntime thread with the item memo off (every text is new work):

- the rollout tool outputs of eval/gate_cost.py (file reads, test logs, searches; about
  1,000 tokens each): p50 and p95 per item;
- benign tool outputs and documents of the detection corpus' test split (agent tool
  outputs, runbooks, READMEs, security articles; training/lib/detection_data.py), where the
  screen clears less;
- injections through tools from the same split, which the screen should never clear: the
  cost of suspicious text;
- tool outputs of the real benign agent traffic (eval/agent_traffic.py's test-split
  conversations: repository files, issues, logs, diffs, web pages, policies, mail), text
  that no one here wrote, as agents read it.

The previous release's detector (the `detector-v2` manifest entry) is measured beside it;
`--models DIR` measures another models folder's, and `--beside DIR` adds DIR's detector
to the same interleaved run (two builds side by side: `--models BUILD --beside models`).

The lane runs the detector, the directives view (rules, classifiers/directives.py) and the
notes model (classifiers/notes.py: paragraphs that ask something) on each turn: its cost is
their sum (the table's last row). For the corpus sets, CPU ms per 1,000 tokens (total CPU
over total tokens) and the share of items the screens cleared (every window of them). The
target is <= 60 ms per 1,000-token delta on one core (one core then keeps up with >= 15
agent turns/s). Writes eval/out/monitor_cost.md.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from deltaguard.artifacts import load_manifest
from deltaguard.classifiers.base import Classifier
from deltaguard.classifiers.directives import DirectivesClassifier
from deltaguard.classifiers.encoder import EncoderClassifier
from deltaguard.classifiers.notes import NotesClassifier
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR
from deltaguard.parsing import parse_item
from deltaguard.tools.rollouts import tool_output
from eval.options import add_models_option
from eval.report import write_report

OUT = Path(__file__).resolve().parent / "out" / "monitor_cost.md"
TEXTS = 100
CORPUS_TEXTS = 300
REPEAT = 3
BUDGET_MS = 60.0
PREVIOUS = ("detector-v2",)  # manifest entries measured beside the shipped detector


def tool_item(text: str) -> Item:
    return parse_item({"type": "function_call_output", "call_id": "c", "output": text})


def corpus_items(benign: bool, n: int) -> list[Item]:
    """Test-split tool outputs and documents of the detection corpus, a fixed sample."""
    from training.lib import detector_spec as spec
    from training.lib.detector_rows import load_rows

    rows = [
        r
        for r in load_rows()
        if r["split"] == "test"
        and r["channel"] in spec.INDIRECT_CHANNELS
        and (r["label"] == "benign") == benign
    ]
    random.Random(7).shuffle(rows)
    return [tool_item(r["text"]) for r in rows[:n]]


def agent_traffic_items(n: int) -> list[Item]:
    """Tool outputs of the real benign agent conversations of the test split, a fixed sample."""
    from eval.agent_traffic import tool_outputs

    return [tool_item(text) for text in tool_outputs("test", n)]


def measure(lanes: dict[str, Classifier], items: list[Item], repeat: int) -> dict[str, list[float]]:
    """CPU ms of this thread per item and classifier, interleaved."""
    times: dict[str, list[float]] = {name: [] for name in lanes}
    for _ in range(repeat):
        for item in items:
            for name, clf in lanes.items():
                state = clf.initial_state()
                t0 = time.thread_time()
                clf.update(state, [item])
                times[name].append((time.thread_time() - t0) * 1e3)
    return times


def cleared(clf: EncoderClassifier, items: list[Item]) -> float:
    """The share of items the screen clears (all-zero scores)."""
    scores = [clf.update(clf.initial_state(), [item]).item_scores[0] for item in items]
    return sum(set(s.values()) == {0.0} for s in scores) / max(len(scores), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=TEXTS)
    parser.add_argument("--corpus-texts", type=int, default=CORPUS_TEXTS)
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument("--out", type=Path, default=OUT)
    add_models_option(parser, MODELS_DIR, "the models folder measured")
    parser.add_argument("--beside", type=Path, help="another models folder whose detector is measured too")
    args = parser.parse_args(argv)
    detector = EncoderClassifier(args.models, threads=1, memo_items=0, artifact="detector").load()
    shipped = load_manifest(args.models).get("models", {})
    # What a turn runs, as the default set serves it: the lane's rows, summed below.
    served: dict[str, Classifier] = {
        "detector (default, screened)": detector,
        "directives (rules)": DirectivesClassifier(),
    }
    notes = NotesClassifier(args.models, threads=1).load() if "notes" in shipped else None
    if notes is not None:  # a release before it has none
        served["notes (asking paragraphs)"] = notes
    lanes: dict[str, Classifier] = {
        **served,
        "detector, item screen only": EncoderClassifier(
            args.models, threads=1, memo_items=0, artifact="detector", window_screen=False
        ).share(detector),
        "detector without its screens": EncoderClassifier(
            args.models, threads=1, memo_items=0, artifact="detector", screen=False
        ).share(detector),
        "frozen encoder (opt-in)": EncoderClassifier(
            args.models, threads=1, memo_items=0, artifact="encoder"
        ).load(),
    }
    if notes is not None:
        lanes["notes without its paragraph screen"] = NotesClassifier(args.models, screen=False).share(notes)
    for entry in PREVIOUS:  # the previous release, screened as it shipped: the same budget, side by side
        if entry in shipped:
            lanes[f"{entry} (previous release, screened)"] = EncoderClassifier(
                args.models, threads=1, memo_items=0, artifact=entry
            ).load()
    if args.beside is not None:
        beside = EncoderClassifier(args.beside, threads=1, memo_items=0, artifact="detector").load()
        lanes[f"detector of {args.beside} (screened)"] = beside
    rollouts = [tool_item(tool_output(random.Random(i), 1000)) for i in range(args.texts)]
    times = measure(lanes, rollouts, args.repeat)
    floor = detector.screen[1] if detector.screen else None
    lines = [
        "# Monitor-lane CPU per 1,000-token delta",
        "",
        f"`python -m eval.monitor_cost` (one update per tool output, interleaved, x {args.repeat}; one "
        f"onnxruntime thread, item memo off; CPU ms; budget {BUDGET_MS:.0f} ms per 1,000 tokens; screen "
        f"floor {floor})",
        "",
        f"## Rollout tool outputs ({args.texts}, about 1,000 tokens each)",
        "",
        "| classifier | p50 | p95 | within budget (p50) |",
        "|---|---|---|---|",
    ]
    for name, by in times.items():
        p50, p95 = statistics.median(by), float(np.percentile(by, 95))
        lines.append(f"| {name} | {p50:.2f} | {p95:.2f} | {'yes' if p50 <= BUDGET_MS else 'no'} |")
    lines.append("")
    lines.append(f"The screens cleared {cleared(detector, rollouts):.0%} of them.")
    del lanes["frozen encoder (opt-in)"]  # ~4x the detector: the rollouts say enough
    sets = (
        (
            "Benign tool outputs and documents, detection corpus test split",
            corpus_items(True, args.corpus_texts),
        ),
        ("Injections through tools, detection corpus test split", corpus_items(False, args.corpus_texts)),
        (
            "Real benign agent tool outputs, eval/agent_traffic.py's test split",
            agent_traffic_items(args.corpus_texts),
        ),
    )
    for title, items in sets:
        tokens = sum(i.tokens for i in items)
        by = measure(lanes, items, args.repeat)
        lines += [
            "",
            f"## {title} ({len(items)}, {tokens / len(items):.0f} tokens "
            f"on average; the screens cleared {cleared(detector, items):.0%})",
            "",
            "| classifier | CPU ms per 1,000 tokens | within budget |",
            "|---|---|---|",
        ]
        per = {name: sum(t) / (tokens * args.repeat) * 1000 for name, t in by.items()}
        for name, ms in per.items():
            lines.append(f"| {name} | {ms:.2f} | {'yes' if ms <= BUDGET_MS else 'no'} |")
        lane = sum(per[name] for name in served)
        within = "yes" if lane <= BUDGET_MS else "no"
        lines.append(f"| the lane ({', '.join(served)}) | {lane:.2f} | {within} |")
    write_report(args.out, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

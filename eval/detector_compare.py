"""The shipped detector beside a previous release, at one rule: `python -m eval.detector_compare`.

A release's thresholds were chosen on the validation split of its day; once the real text
grows (a new repository in each split), its figures and the new release's are no longer
measured on the same rows. This puts both through training/train_detector.py's rule on
today's validation split (per-row budgets and per-conversation floors, pasted documents
routed as served) and scores today's test split with each: recall per attack source at
that operating point, flag rates per benign set, and ranking AUC per source against the
benign test rows of the same channel. Writes eval/out/detector_compare.md and .json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from eval.options import add_models_option
from eval.report import write_report
from training.lib import detector_rule as rule
from training.lib import detector_spec as spec
from training.lib.detector_rows import load_rows

OUT = Path(__file__).resolve().parent / "out" / "detector_compare.md"


def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mann-Whitney AUC, ties counted half."""
    from scipy.stats import rankdata

    ranks = rankdata(np.concatenate([pos, neg]))
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def ranking(p: np.ndarray, test: list[dict[str, Any]]) -> dict[str, float]:
    """Per attack source: AUC of the head that judges it against benign rows of its channel.
    A source whose rows span channels (spikee, obfuscated) is ranked on its first row's."""
    indirect = np.array([r["channel"] in spec.INDIRECT_CHANNELS for r in test])
    out = {}
    for source, label in sorted({(r["source"], r["label"]) for r in test if r["label"] != "benign"}):
        idx = [i for i, r in enumerate(test) if (r["source"], r["label"]) == (source, label)]
        channel = indirect[idx[0]]
        head = 1 if label == "jailbreak" else 2 if channel else 0
        benign = [i for i, r in enumerate(test) if r["label"] == "benign" and indirect[i] == channel]
        out[f"{source}/{label}"] = round(auc(p[idx, head], p[benign, head]), 4)
    return out


def release(entry: str, rows: list[dict[str, Any]], convs: list, models: Path) -> dict[str, Any]:
    from deltaguard.classifiers.encoder import EncoderClassifier

    model = EncoderClassifier(models, artifact=entry, screen=False, threads=2).load().model
    validation = [r for r in rows if r["split"] == "validation"]
    test = [r for r in rows if r["split"] == "test"]
    by_rows = rule.choose_thresholds(rule.score_rows(model, validation), validation)
    kinds, maxima = rule.conversation_maxima(model, convs)
    by_conversation = rule.conversation_thresholds(kinds, maxima)
    thresholds = {h: max(by_rows[h], by_conversation[h]) for h in spec.HEADS}
    p = rule.score_rows(model, test)
    return {
        "thresholds": thresholds,
        "rows": by_rows,
        "conversations": by_conversation,
        "test": rule.test_metrics(p, test, thresholds),
        "auc": ranking(p, test),
    }


def report(results: dict[str, dict[str, Any]]) -> list[str]:
    names = list(results)
    lines = [
        "# The shipped detector beside a previous release, at one rule",
        "",
        "`python -m eval.detector_compare`: thresholds by training/train_detector.py's rule on "
        "today's validation split, then today's test split. Recall at that point, AUC against the "
        "benign test rows of the same channel.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        "| thresholds (direct / jailbreak / indirect) | "
        + " | ".join(" / ".join(f"{results[n]['thresholds'][h]:.4f}" for h in spec.HEADS) for n in names)
        + " |",
    ]
    for key in results[names[0]]["test"]["recall"]:
        cells = [
            f"{results[n]['test']['recall'][key]['recall']:.1%} (AUC {results[n]['auc'][key]:.3f})"
            for n in names
        ]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for key in results[names[0]]["test"]["flag_rate"]:
        cells = [f"{results[n]['test']['flag_rate'][key]['rate']:.2%}" for n in names]
        lines.append(f"| benign {key} flagged | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beside", default="detector-v2", help="manifest entry of the previous release")
    parser.add_argument("--out", type=Path, default=OUT)
    add_models_option(parser, spec.MODELS_DIR, "the models folder read")
    args = parser.parse_args(argv)
    rows = load_rows()
    convs = rule.agent_conversations("validation")
    results = {name: release(name, rows, convs, args.models) for name in (spec.ARTIFACT, args.beside)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    write_report(args.out, report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

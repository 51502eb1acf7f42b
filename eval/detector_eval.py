"""Leave-sources-out evaluation of the fine-tuned detector: `python -m eval.detector_eval`.

Each fold fine-tunes the detector recipe (training/train_detector.py) without one group of
sources, nor any row sharing a group with them (clean twins, obfuscated copies), chooses
its thresholds on its own validation rows, and scores every row of the held-out sources
plus the benign test rows of the sources it trained on, through the serving path
(int8 ONNX, normaliser views, windows). Fine-tuning costs ~10 minutes a fold on 2 cores,
so sources are held out in FOLDS (a stricter test than one source at a time: each fold
also loses its neighbours' data), and each source is reported from the fold that held it
out. The shipped model's own test-split figures are shown beside, with the lexical-v3
leave-one-source-out figures of eval/detection_eval.py when its report exists.

Writes eval/out/detector_eval.md, .json and eval/figures/detector_loso.png. A fold whose
scores exist in .cache/detector is not retrained (delete them to rerun).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from eval.detection_eval import auc_ci, fmt_ci, interval_bars, wilson
from training import train_detector as recipe

OUT = Path(__file__).resolve().parent / "out"
FIGURE = Path(__file__).resolve().parent / "figures" / "detector_loso.png"
FOLDS = (
    ("s-labs",),
    ("pyrit", "spikee"),
    ("agentdojo", "raginject"),
    ("deepset-fuzzer", "obfuscated", "yanismiraoui"),
)
FOLD_EPOCHS = 1
FOLD_CAP = 1000
TARGETS = {"direct": (0.95, 0.85), "indirect": (0.90, 0.80)}
BENIGN_BUDGETS = {"chat": 0.01, "tool": 0.02, "lookalike": 0.05, "prompts": None, "harmful": None}


def log(msg: str) -> None:
    print(f"[detector_eval {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def attack_scores(p: np.ndarray, rows: list[dict[str, Any]], thresholds: dict[str, float]) -> np.ndarray:
    """One score per row: the max over the heads that judge it, each scaled so that its
    threshold is 0.5 (the classifier's own scale: flagged at >= 0.5)."""
    from deltaguard.classifiers.scaled import scale

    indirect = np.array([r["channel"] in recipe.INDIRECT_CHANNELS for r in rows])
    scaled = np.array(
        [[scale(float(v), thresholds[h]) for v in p[:, i]] for i, h in enumerate(recipe.HEADS)]
    ).T
    injection = np.where(indirect, scaled[:, 2], scaled[:, 0])
    return np.maximum(injection, scaled[:, 1])


def fold_results(epochs: int, cap: int) -> list[dict[str, Any]]:
    out = []
    for sources in FOLDS:
        name = "fold-" + "+".join(sorted(sources))
        path = recipe.WORK / f"{name}.json"
        if not path.exists():
            log(f"{name}: training")
            recipe.run_fold(list(sources), epochs, cap)
        out.append(json.loads(path.read_text()))
    return out


def kind(row: dict[str, Any]) -> str:
    """direct: user messages; indirect: tool outputs and documents."""
    return "indirect" if row["channel"] in recipe.INDIRECT_CHANNELS else "direct"


def summarise(folds: list[dict[str, Any]]) -> dict[str, Any]:
    sources: dict[str, Any] = {}
    families: dict[tuple[str, str], list[float]] = defaultdict(list)
    benign: dict[str, list[float]] = defaultdict(list)
    for fold in folds:
        rows = fold["rows"]
        s = attack_scores(np.array(fold["scores"]), rows, fold["thresholds"])
        held = set(fold["held_out"])
        negatives = s[[i for i, r in enumerate(rows) if r["label"] == "benign"]]
        for source in sorted(held):
            for where in ("direct", "indirect"):
                idx = [i for i, r in enumerate(rows) if r["source"] == source and kind(r) == where]
                attacks = s[[i for i in idx if rows[i]["label"] != "benign"]]
                own_benign = s[[i for i in idx if rows[i]["label"] == "benign"]]
                if not len(attacks) and not len(own_benign):
                    continue
                entry: dict[str, Any] = {
                    "fold": sorted(held),
                    "kind": where,
                    "attacks": len(attacks),
                    "benign": len(own_benign),
                }
                if len(attacks):
                    k = int(np.sum(attacks >= 0.5))
                    entry["recall"] = (k / len(attacks), *wilson(k, len(attacks)))
                    entry["auc"] = auc_ci(attacks, negatives)
                if len(own_benign):
                    k = int(np.sum(own_benign >= 0.5))
                    entry["flag_rate"] = (k / len(own_benign), *wilson(k, len(own_benign)))
                sources[f"{source} ({where})"] = entry
        for i, r in enumerate(rows):
            if r["source"] in held and r["label"] != "benign":
                families[(r["family"], r["source"])].append(float(s[i]))
            if r["label"] == "benign" and r["fp_set"]:
                benign[r["fp_set"]].append(float(s[i]))
    fam = {
        f"{f} ({src})": {"n": len(v), "recall": (k / len(v), *wilson(k, len(v)))}
        for (f, src), v in sorted(families.items())
        for k in [int(np.sum(np.array(v) >= 0.5))]
    }
    ben = {
        s: {"n": len(v), "flag_rate": (k / len(v), *wilson(k, len(v)))}
        for s, v in sorted(benign.items())
        for k in [int(np.sum(np.array(v) >= 0.5))]
    }
    return {"sources": sources, "families": fam, "benign_sets": ben}


def lexical_loso() -> dict[str, Any]:
    path = OUT / "detection_eval.json"
    return json.loads(path.read_text())["sources"] if path.exists() else {}


def meets(entry: dict[str, Any]) -> str:
    auc_t, rec_t = TARGETS[entry["kind"]]
    ok = entry["auc"] and entry["auc"][0] >= auc_t and entry["recall"][0] >= rec_t
    return "yes" if ok else "no"


def report(summary: dict[str, Any], shipped: dict[str, Any] | None, elapsed: float) -> str:
    lex = lexical_loso()
    recipe_note = summary.get("recipe", {})
    lines = [
        "# Fine-tuned detector: leave-sources-out evaluation",
        "",
        "Command: `python -m eval.detector_eval` "
        f"({elapsed / 60:.0f} min this run; folds already in .cache/detector are reused).",
        "",
        "Folds (each trains on every other source, minus rows sharing a group with the held-out ones): "
        + "; ".join(" + ".join(f) for f in FOLDS)
        + f". Each fold trains the recipe for {recipe_note.get('epochs')} epoch(s) on at most "
        f"{recipe_note.get('cap_per_cell')} rows per source, label and channel (the shipped model: "
        f"{recipe.EPOCHS} epochs, {recipe.CAP_PER_CELL}). "
        "Operating point: each fold's thresholds chosen on its own validation rows with the shipped "
        "rule (max F1 within flag-rate budgets per benign set); nothing is tuned on held-out rows. "
        "Intervals are 95% (Wilson for rates, Hanley-McNeil for AUC). Negatives for AUC: the held-out "
        "source's benign rows and the benign test rows of the fold's training sources. Held-out rows "
        f"are sampled, at most {recipe.FOLD_SAMPLE} per source and label.",
        "",
        f"Targets: direct injection and jailbreak AUC >= {TARGETS['direct'][0]}, recall >= "
        f"{TARGETS['direct'][1]}; indirect (tool outputs, documents) AUC >= {TARGETS['indirect'][0]}, "
        f"recall >= {TARGETS['indirect'][1]}.",
        "",
        "| held-out source (channel) | kind | attacks | detector AUC | detector recall | own benign flagged "
        "| meets target | lexical-v3 LOSO AUC (whole source) | lexical-v3 LOSO recall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for source, e in sorted(summary["sources"].items()):
        if not e["attacks"]:
            continue
        lx = lex.get(source.split(" (")[0], {})
        lines.append(
            f"| {source} | {e['kind']} | {e['attacks']} | {fmt_ci(*e['auc'])} "
            f"| {fmt_ci(*e['recall'], pct=True)} "
            f"| {fmt_ci(*e['flag_rate'], pct=True) if 'flag_rate' in e else '-'} | {meets(e)} "
            f"| {fmt_ci(*lx['auc']) if lx.get('auc') else '-'} "
            f"| {fmt_ci(*lx['recall'], pct=True) if lx.get('recall') else '-'} |"
        )
    lines += [
        "",
        "## Benign rows flagged",
        "",
        "Every fold's benign rows: the held-out sources' own and the training sources' test split.",
        "",
        "| benign set | n | flagged | budget |",
        "|---|---|---|---|",
    ]
    for s, e in summary["benign_sets"].items():
        budget = BENIGN_BUDGETS.get(s)
        lines.append(
            f"| {s} | {e['n']} | {fmt_ci(*e['flag_rate'], pct=True)} "
            f"| {f'<= {budget:.0%}' if budget else '-'} |"
        )
    lines += [
        "",
        "## Recall per attack family (held-out rows only)",
        "",
        "| family (source) | n | recall |",
        "|---|---|---|",
    ]
    for f, e in summary["families"].items():
        lines.append(f"| {f} | {e['n']} | {fmt_ci(*e['recall'], pct=True)} |")
    if shipped:
        lines += [
            "",
            "## The shipped detector on the test split (sources seen in training: not held out)",
            "",
            "```",
            json.dumps(shipped, indent=1),
            "```",
        ]
    return "\n".join(lines) + "\n"


def _lex(lex: dict[str, Any], source: str, key: str) -> tuple[float, float, float]:
    return tuple(lex.get(source.split(" (")[0], {}).get(key) or (math.nan,) * 3)


def plot(summary: dict[str, Any], path: Path) -> None:
    lex = lexical_loso()
    sources = [s for s, e in sorted(summary["sources"].items()) if e["attacks"]]
    bars = (
        ([summary["sources"][s]["auc"] for s in sources], "detector AUC (held out)"),
        ([summary["sources"][s]["recall"] for s in sources], "detector recall (held out)"),
        ([_lex(lex, s, "auc") for s in sources], "lexical-v3 LOSO AUC (whole source)"),
        ([_lex(lex, s, "recall") for s in sources], "lexical-v3 LOSO recall (whole source)"),
    )
    interval_bars(sources, bars, "held-out sources: fine-tuned detector vs lexical-v3 (95% intervals)", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Folds train a cheaper variant of the recipe by default (one epoch, fewer rows per
    # cell): four full fine-tunings do not fit beside other work on 2 cores.
    parser.add_argument("--epochs", type=int, default=FOLD_EPOCHS)
    parser.add_argument("--cap", type=int, default=FOLD_CAP, help="training rows per source/label/channel")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    t0 = time.time()
    folds = fold_results(args.epochs, args.cap)
    summary = summarise(folds)
    summary["recipe"] = {"epochs": folds[0].get("epochs"), "cap_per_cell": folds[0].get("cap_per_cell")}
    from deltaguard.artifacts import manifest_entry

    shipped = manifest_entry(recipe.ARTIFACT).get("metrics")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "detector_eval.md").write_text(report(summary, shipped, time.time() - t0))
    (args.out / "detector_eval.json").write_text(json.dumps(summary, indent=1))
    plot(summary, FIGURE)
    log(f"wrote {args.out / 'detector_eval.md'} and {FIGURE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

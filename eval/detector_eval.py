"""Leave-sources-out evaluation of the fine-tuned detector: `python -m eval.detector_eval`.

Each fold fine-tunes the detector recipe (training/train_detector.py) without one group of
sources, nor any row sharing a group with them (clean twins, obfuscated copies), chooses
its thresholds on its own validation rows, and scores every row of the held-out sources
plus the benign test rows of the sources it trained on, through the serving path
(int8 ONNX, normaliser views, windows). Fine-tuning costs ~10-15 minutes a fold on 2 cores,
so sources are held out in FOLDS (a stricter test than one source at a time: each fold
also loses its neighbours' data), and each source is reported from the fold that held it
out.

Beside the detector, on the same rows: lexical-v3's recipe fitted on the same fold (its
own threshold rule, ~2 minutes a fold), and the default pipeline's verdict on the
injection categories, the detector or the view that judges the row's role in the gate:
lexical-v3's fold model for tool outputs and documents, the shipped conversation view
(lexical-v2, trained on S-Labs and PyRIT, so not held out for those two) for user
messages. The shipped detector's test-split figures close the report.

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
    conversation = ConversationView()
    for sources in FOLDS:
        name = "fold-" + "+".join(sorted(sources))
        path = recipe.WORK / f"{name}.json"
        if not path.exists():
            log(f"{name}: training")
            recipe.run_fold(list(sources), epochs, cap)
        fold = json.loads(path.read_text())
        if (fold["epochs"], fold["cap_per_cell"]) != (epochs, cap):
            raise SystemExit(
                f"{path} was trained with {fold['epochs']} epoch(s) and cap {fold['cap_per_cell']}, "
                f"not {epochs} and {cap}: pass those, or delete it and {recipe.WORK / name} to retrain"
            )
        # The operating point is chosen again with today's rule on the fold's own
        # validation rows: a change of rule needs no retraining.
        validation, p = recipe.fold_validation(list(sources))
        fold["thresholds"] = recipe.choose_thresholds(p, validation)
        rows = fold["rows"]
        detector = attack_scores(np.array(fold["scores"]), rows, fold["thresholds"])
        lexical = lexical_attack(sources, validation)
        _, scored = recipe.fold_rows(list(sources))
        if [r["group"] for r in scored] != [r["group"] for r in rows]:
            raise SystemExit(f"{name}: the rows changed since the fold was trained (delete it to rerun)")
        user = conversation.scores([r["text"] if r["channel"] == "user" else "" for r in scored])
        indirect = np.array([kind(r) == "indirect" for r in rows])
        fold["attack"] = {
            "detector": detector,
            "lexical-v3": lexical,
            "pipeline": np.maximum(detector, np.where(indirect, lexical, user)),
        }
        out.append(fold)
    return out


class ConversationView:
    """The default set's judge of user messages, on a conversation of one message."""

    def __init__(self) -> None:
        from deltaguard.classifiers.registry import load_classifiers

        (self.classifier,) = load_classifiers(("conversation",))

    def scores(self, texts: list[str]) -> np.ndarray:
        from deltaguard.parsing import parse_item

        clf = self.classifier
        out = np.zeros(len(texts))
        for i, text in enumerate(texts):
            if text:
                upd = clf.update(clf.initial_state(), [parse_item({"role": "user", "content": text})])
                out[i] = max(upd.scores.get(c, 0.0) for c in ("prompt_injection", "jailbreak"))
        return out


def lexical_attack(sources: tuple[str, ...], validation: list[dict[str, Any]]) -> np.ndarray:
    """lexical-v3's fold model on the fold's scored rows, 0.5 = flagged at the thresholds
    its own recipe's rule (max F1 within flag-rate budgets) picks on the fold's validation."""
    from eval.detection_eval import attack_score
    from training.lexical_fit import HEADS, POSITIVE, head_rows
    from training.train_lexical_v3 import FP_BUDGETS, choose_threshold

    p_val, p_scored = lexical_fold(sources)
    rows = as_rows(validation)
    thresholds = {}
    for h, head in enumerate(HEADS):
        idx = head_rows(rows, head)
        y = np.array([rows[i].label == POSITIVE[head] for i in idx], dtype=int)
        benign = {s: p_val[[i for i, r in enumerate(rows) if r.fp_set == s], h] for s in FP_BUDGETS}
        # a head the fold could not fit (no positives left) scores 0 and never flags
        thresholds[head] = choose_threshold(y, p_val[idx, h], benign) if p_val[:, h].any() else 1.0
    return attack_score(p_scored, thresholds)


def as_rows(rows: list[dict[str, Any]]) -> list[Any]:
    import dataclasses

    from training.detection_data import Row

    fields = [f.name for f in dataclasses.fields(Row)]
    return [Row(**{k: r[k] for k in fields}) for r in rows]


def lexical_fold(sources: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """lexical-v3's recipe (eval/detection_eval.py's fold settings) fitted on a fold's
    training rows: its per-head probabilities on the fold's validation rows and on the
    rows the fold scores, cached beside the fold's detector."""
    cache = recipe.WORK / ("fold-" + "+".join(sorted(sources))) / "lexical-scores.npz"
    if cache.exists():
        with np.load(cache, allow_pickle=False) as z:
            return z["validation"], z["scored"]
    import tempfile

    from eval.detection_eval import FOLD_SETTINGS
    from training.lexical_fit import HEADS, fit, to_model

    rest, scored = recipe.fold_rows(list(sources))
    t0 = time.time()
    train = as_rows([r for r in rest if r["split"] == "train"])
    union, models = fit(train, as_rows([r for r in rest if r["split"] == "validation"]), FOLD_SETTINGS)
    with tempfile.TemporaryDirectory() as tmp:
        model = to_model(union, models, Path(tmp) / "fold.npz", heads=list(models))
    columns = [list(models).index(h) if h in models else None for h in HEADS]

    def score(texts: list[str]) -> np.ndarray:  # a head the fold could not fit scores 0
        p = model.score_many(texts)
        return np.stack([p[:, c] if c is not None else np.zeros(len(texts)) for c in columns], axis=1)

    validation = score([r["text"] for r in rest if r["split"] == "validation"])
    held = score([r["text"] for r in scored])
    np.savez_compressed(cache, validation=validation, scored=held)
    log(f"lexical fold {'+'.join(sources)}: {time.time() - t0:.0f}s")
    return validation, held


def kind(row: dict[str, Any]) -> str:
    """direct: user messages; indirect: tool outputs and documents."""
    return "indirect" if row["channel"] in recipe.INDIRECT_CHANNELS else "direct"


SCORERS = ("detector", "lexical-v3", "pipeline")
# The conversation view's lexical-v2 trained on these: the pipeline's verdict on their user
# messages is not a held-out figure.
SEEN_BY_CONVERSATION = frozenset({"s-labs", "pyrit"})


def _recall_auc(s: np.ndarray, attacks: list[int], negatives: np.ndarray) -> dict[str, Any]:
    k = int(np.sum(s[attacks] >= 0.5))
    return {"recall": (k / len(attacks), *wilson(k, len(attacks))), "auc": auc_ci(s[attacks], negatives)}


def summarise(folds: list[dict[str, Any]]) -> dict[str, Any]:
    sources: dict[str, Any] = {}
    benign: dict[str, dict[str, list[float]]] = {n: defaultdict(list) for n in SCORERS}
    fam_scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    for fold in folds:
        rows = fold["rows"]
        held = set(fold["held_out"])
        negatives = [i for i, r in enumerate(rows) if r["label"] == "benign"]
        for source in sorted(held):
            for where in ("direct", "indirect"):
                idx = [i for i, r in enumerate(rows) if r["source"] == source and kind(r) == where]
                attacks = [i for i in idx if rows[i]["label"] != "benign"]
                own_benign = [i for i in idx if rows[i]["label"] == "benign"]
                if not attacks:
                    continue
                entry: dict[str, Any] = {"fold": sorted(held), "kind": where, "attacks": len(attacks)}
                for name in SCORERS:
                    s = fold["attack"][name]
                    if name == "pipeline" and where == "direct" and source in SEEN_BY_CONVERSATION:
                        continue
                    entry[name] = _recall_auc(s, attacks, s[negatives])
                    if own_benign:
                        k = int(np.sum(s[own_benign] >= 0.5))
                        entry[name]["flag_rate"] = (k / len(own_benign), *wilson(k, len(own_benign)))
                sources[f"{source} ({where})"] = entry
        s = fold["attack"]["detector"]
        for i, r in enumerate(rows):
            if r["source"] in held and r["label"] != "benign":
                fam_scores[(r["family"], r["source"])].append(float(s[i]))
            if r["label"] == "benign" and r["fp_set"]:
                for name in SCORERS:
                    benign[name][r["fp_set"]].append(float(fold["attack"][name][i]))
    fam = {
        f"{f} ({src})": {"n": len(v), "recall": (k / len(v), *wilson(k, len(v)))}
        for (f, src), v in sorted(fam_scores.items())
        for k in [int(np.sum(np.array(v) >= 0.5))]
    }
    ben = {
        name: {
            s: {"n": len(v), "flag_rate": (k / len(v), *wilson(k, len(v)))}
            for s, v in sorted(sets.items())
            for k in [int(np.sum(np.array(v) >= 0.5))]
        }
        for name, sets in benign.items()
    }
    return {"sources": sources, "families": fam, "benign_sets": ben}


def meets(entry: dict[str, Any], scorer: str) -> str:
    if scorer not in entry:
        return "-"
    auc_t, rec_t = TARGETS[entry["kind"]]
    e = entry[scorer]
    return "yes" if e["auc"] and e["auc"][0] >= auc_t and e["recall"][0] >= rec_t else "no"


def _cell(entry: dict[str, Any], scorer: str, key: str) -> str:
    value = entry.get(scorer, {}).get(key)
    return fmt_ci(*value, pct=key != "auc") if value else "-"


def report(summary: dict[str, Any], shipped: dict[str, Any] | None, elapsed: float) -> str:
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
        f"rule (per head, the most sensitive threshold within flag-rate budgets {recipe.FP_BUDGETS} on "
        "each benign validation set, each group weighing the same); nothing is tuned on held-out rows. "
        "lexical-v3: its recipe fitted on the same fold, thresholds by its own rule (max F1 within "
        "budgets) on the same validation rows. Pipeline: flagged when the detector or the row's gate "
        "view flags (lexical-v3's fold model for tool outputs and documents, the shipped conversation "
        "view for user messages; '-' where that view's lexical-v2 trained on the source). "
        "Intervals are 95% (Wilson for rates, Hanley-McNeil for AUC). Negatives for AUC: the held-out "
        "source's benign rows and the benign test rows of the fold's training sources. Held-out rows "
        f"are sampled, at most {recipe.FOLD_SAMPLE} per source and label.",
        "",
        f"Targets: direct injection and jailbreak AUC >= {TARGETS['direct'][0]}, recall >= "
        f"{TARGETS['direct'][1]}; indirect (tool outputs, documents) AUC >= {TARGETS['indirect'][0]}, "
        f"recall >= {TARGETS['indirect'][1]}.",
        "",
        "| held-out source (channel) | attacks | detector AUC | detector recall | lexical-v3 AUC "
        "| lexical-v3 recall | pipeline AUC | pipeline recall | pipeline: own benign flagged "
        "| meets target (detector / pipeline) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for source, e in sorted(summary["sources"].items()):
        lines.append(
            f"| {source} | {e['attacks']} "
            + " ".join(f"| {_cell(e, n, 'auc')} | {_cell(e, n, 'recall')}" for n in SCORERS)
            + f" | {_cell(e, 'pipeline', 'flag_rate')} | {meets(e, 'detector')} / {meets(e, 'pipeline')} |"
        )
    lines += [
        "",
        "## Benign rows flagged",
        "",
        "Every fold's benign rows: the held-out sources' own and the training sources' test split.",
        "",
        "| benign set | n | detector | lexical-v3 | pipeline | budget |",
        "|---|---|---|---|---|---|",
    ]
    sets = summary["benign_sets"]
    for s, e in sets["detector"].items():
        budget = BENIGN_BUDGETS.get(s)
        lines.append(
            f"| {s} | {e['n']} | "
            + " | ".join(fmt_ci(*sets[n][s]["flag_rate"], pct=True) for n in SCORERS)
            + f" | {f'<= {budget:.0%}' if budget else '-'} |"
        )
    lines += [
        "",
        "## Detector recall per attack family (held-out rows only)",
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


def plot(summary: dict[str, Any], path: Path) -> None:
    nan = (math.nan,) * 3
    sources = sorted(summary["sources"])
    bars = tuple(
        ([summary["sources"][s].get(n, {}).get(key) or nan for s in sources], f"{n} {key} (held out)")
        for key in ("auc", "recall")
        for n in SCORERS
    )
    title = "held-out sources: detector, lexical-v3, default pipeline (95% intervals)"
    interval_bars(sources, bars, title, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Folds train the shipped recipe by default; --epochs 1 --cap 1000 is a quicker,
    # weaker variant (held-out S-Labs recall 23% against the shipped recipe's 49%).
    parser.add_argument("--epochs", type=int, default=recipe.EPOCHS)
    parser.add_argument(
        "--cap", type=int, default=recipe.CAP_PER_CELL, help="training rows per source/label/channel"
    )
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

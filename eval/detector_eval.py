"""Leave-sources-out evaluation of the fine-tuned detector: `python -m eval.detector_eval`.

The folds are training/lib/detector_folds.py's: each fine-tunes the detector recipe without
one group of sources (FOLDS), nor any row sharing a group with them (clean twins,
obfuscated copies), chooses its thresholds on its own validation rows, and scores every
row of the held-out sources plus the benign test rows of the sources it trained on,
through the serving path (int8 ONNX, normaliser views, windows). Each source is reported
from the fold that held it out.

Beside the detector, on the same rows: lexical-v3's recipe fitted on the same fold (its
own threshold rule, ~2 minutes a fold), and the default pipeline's verdict on the
injection categories: the detector behind its screen (training/detector_screen.py, each
fold with the floor the other folds choose) or the view that judges the row's role in the
gate: lexical-v3's fold model for tool outputs and documents, the shipped conversation view
(lexical-v2, trained on S-Labs and PyRIT, so not held out for those two) for user
messages. The shipped detector's test-split figures close the report.

Writes eval/out/detector_eval.md, .json and eval/figures/detector_loso.png. A fold whose
scores exist in .cache/detector is not retrained (delete them to rerun). `--carriers`
evaluates the recipe with the carriers' rows (`python -m training.train_detector --carriers`)
in folds of its own, its figure beside the report.
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
from training.lib import detector_spec as spec
from training.lib import screen_floor as screen
from training.lib.detector_folds import FOLDS, as_rows, lexical_fold, load_fold
from training.lib.log import make_log

OUT = Path(__file__).resolve().parent / "out"
FIGURE = Path(__file__).resolve().parent / "figures" / "detector_loso.png"
TARGETS = {"direct": (0.95, 0.85), "indirect": (0.90, 0.80)}
BENIGN_BUDGETS = {"chat": 0.01, "tool": 0.02, "lookalike": 0.05, "prompts": None, "harmful": None}


log = make_log("detector_eval")


def fold_results(
    epochs: int, cap: int, carriers: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The folds with each scorer's attack scores, and the screen's nested evidence."""
    folds, screens = [], []
    for sources in FOLDS:
        fold = load_fold(sources, epochs, cap, carriers)
        fold["lexical_validation"], fold["lexical"] = lexical_fold(sources, carriers)
        screens.append(screen.fold_evidence(sources, fold, fold["lexical"]))
        folds.append(fold)
    # The screen as it would ship from the other folds alone: its floor is chosen on the
    # folds, so each fold is judged with the floor the others choose.
    nested = screen.nested(screens)
    conversation = ConversationView()
    for fold, evidence, check in zip(folds, screens, nested, strict=True):
        rows = fold["rows"]
        detector = fold["detector"]
        screened = np.where(screen.cleared(evidence, check["floor"]), 0.0, detector)
        lexical = lexical_attack(fold["validation"], fold["lexical_validation"], fold["lexical"])
        texts = [t if r["channel"] == "user" else "" for t, r in zip(fold["texts"], rows, strict=True)]
        user = conversation.scores(texts)
        indirect = np.array([kind(r) == "indirect" for r in rows])
        fold["attack"] = {
            "detector": detector,
            "lexical-v3": lexical,
            "pipeline": np.maximum(screened, np.where(indirect, lexical, user)),
        }
    floor = screen.choose_floor(screens)
    summary = {
        "floor": floor,
        "lost_caught": screen.losses(screens, floor),
        "benign_user_cleared": screen.benign_cleared(screens, floor, False),
        "benign_tool_cleared": screen.benign_cleared(screens, floor, True),
        "nested": nested,
    }
    return folds, summary


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


def lexical_attack(validation: list[dict[str, Any]], p_val: np.ndarray, p_scored: np.ndarray) -> np.ndarray:
    """lexical-v3's fold model (`lexical_fold`'s probabilities) on the fold's scored rows,
    0.5 = flagged at the thresholds its own recipe's rule (max F1 within flag-rate budgets)
    picks on the fold's validation rows."""
    from eval.detection_eval import attack_score
    from training.lib.lexical_fit import FP_BUDGETS, HEADS, POSITIVE, choose_threshold, head_rows

    rows = as_rows(validation)
    thresholds = {}
    for h, head in enumerate(HEADS):
        idx = head_rows(rows, head)
        y = np.array([rows[i].label == POSITIVE[head] for i in idx], dtype=int)
        benign = {s: p_val[[i for i, r in enumerate(rows) if r.fp_set == s], h] for s in FP_BUDGETS}
        # a head the fold could not fit (no positives left) scores 0 and never flags
        thresholds[head] = choose_threshold(y, p_val[idx, h], benign) if p_val[:, h].any() else 1.0
    return attack_score(p_scored, thresholds)


def kind(row: dict[str, Any]) -> str:
    """direct: user messages; indirect: tool outputs and documents."""
    return "indirect" if row["channel"] in spec.INDIRECT_CHANNELS else "direct"


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
    # (fold, group) -> flagged, per scorer and set: each group of near-duplicates weighs one
    groups: dict[str, dict[str, dict[tuple[int, str], list[bool]]]] = {
        n: defaultdict(lambda: defaultdict(list)) for n in SCORERS
    }
    fam_scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    for f_i, fold in enumerate(folds):
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
                    score = float(fold["attack"][name][i])
                    benign[name][r["fp_set"]].append(score)
                    groups[name][r["fp_set"]][(f_i, r["group"])].append(score >= 0.5)
    fam = {
        f"{f} ({src})": {"n": len(v), "recall": (k / len(v), *wilson(k, len(v)))}
        for (f, src), v in sorted(fam_scores.items())
        for k in [int(np.sum(np.array(v) >= 0.5))]
    }
    ben = {
        name: {
            s: {
                "n": len(v),
                "flag_rate": (k / len(v), *wilson(k, len(v))),
                "groups": len(shares),
                "by_group": (sum(shares) / len(shares), *wilson(sum(shares), len(shares))),
            }
            for s, v in sorted(sets.items())
            for k in [int(np.sum(np.array(v) >= 0.5))]
            for shares in [[sum(f) / len(f) for f in groups[name][s].values()]]
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


def screen_lines(check: dict[str, Any], shipped_floor: float | None) -> list[str]:
    lost, caught = check["lost_caught"]
    lines = [
        "",
        "## The detector's screen",
        "",
        "lexical-v3 clears an item before the detector runs when every lexical head is under the "
        "screen's floor (training/detector_screen.py). The floor is chosen on these folds: the "
        f"largest of {list(screen.GRID)} that clears at most {screen.LOSS_BUDGET:.1%} of the held-out "
        "attacks the detector flags. The pipeline column above applies it nested: each fold with the "
        "floor the other folds choose.",
        "",
        f"All folds choose **{check['floor']}** (shipped: {shipped_floor}): it clears {lost} of the "
        f"detector's {caught} held-out catches, {check['benign_user_cleared']:.1%} of benign user "
        f"messages and {check['benign_tool_cleared']:.1%} of benign tool outputs and documents.",
        "",
        "| fold | floor (from the other folds) | detector catches cleared | benign user cleared "
        "| benign tool/doc cleared |",
        "|---|---|---|---|---|",
    ]
    for n in check["nested"]:
        lines.append(
            f"| {n['fold']} | {n['floor']} | {n['lost']} / {n['caught']} | {n['benign_user_cleared']:.1%} "
            f"| {n['benign_tool_cleared']:.1%} |"
        )
    return lines


def report(summary: dict[str, Any], shipped: dict[str, Any] | None, elapsed: float) -> str:
    recipe_note = summary.get("recipe", {})
    lines = [
        "# Fine-tuned detector: leave-sources-out evaluation",
        "",
        f"Command: `python -m eval.detector_eval{' --carriers' if summary.get('carriers') else ''}` "
        f"({elapsed / 60:.0f} min this run; folds already in .cache/detector are reused).",
        "",
        "Folds (each trains on every other source, minus rows sharing a group with the held-out ones): "
        + "; ".join(" + ".join(f) for f in FOLDS)
        + (
            ". The recipe with the carriers' rows (training/lib/carrier_rows.py, `train_detector --carriers`)"
            if summary.get("carriers")
            else ""
        )
        + f". Each fold trains the recipe for {recipe_note.get('epochs')} epoch(s) on at most "
        f"{recipe_note.get('cap_per_cell')} rows per source, label and channel (the shipped model: "
        f"{spec.EPOCHS} epochs, {spec.CAP_PER_CELL}). "
        "Operating point: each fold's thresholds chosen on its own validation rows with the shipped "
        f"rule (per head, the most sensitive threshold within flag-rate budgets {spec.FP_BUDGETS} on "
        "each benign validation set, each group weighing the same); nothing is tuned on held-out rows. "
        "lexical-v3: its recipe fitted on the same fold, thresholds by its own rule (max F1 within "
        "budgets) on the same validation rows. Pipeline: flagged when the detector (behind its screen, "
        "see below) or the row's gate "
        "view flags (lexical-v3's fold model for tool outputs and documents, the shipped conversation "
        "view for user messages; '-' where that view's lexical-v2 trained on the source). "
        "Intervals are 95% (Wilson for rates, Hanley-McNeil for AUC). Negatives for AUC: the held-out "
        "source's benign rows and the benign test rows of the fold's training sources. Held-out rows "
        f"are sampled, at most {spec.FOLD_SAMPLE} per source and label.",
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
        "Every fold's benign rows: the held-out sources' own and the training sources' test split. "
        "By group: each group of near-duplicates in a fold (a templated document and its fillings "
        "and obfuscated copies, a conversation, a source file) weighs one, as in the rule the "
        "operating points are chosen by.",
        "",
        "| benign set | n | detector | lexical-v3 | pipeline | groups | pipeline, by group | budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sets = summary["benign_sets"]
    for s, e in sets["detector"].items():
        budget = BENIGN_BUDGETS.get(s)
        lines.append(
            f"| {s} | {e['n']} | "
            + " | ".join(fmt_ci(*sets[n][s]["flag_rate"], pct=True) for n in SCORERS)
            + f" | {e['groups']} | {fmt_ci(*sets['pipeline'][s]['by_group'], pct=True)}"
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
    lines += screen_lines(summary["screen"], summary.get("shipped_floor"))
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
    parser.add_argument("--epochs", type=int, default=spec.EPOCHS)
    parser.add_argument(
        "--cap", type=int, default=spec.CAP_PER_CELL, help="training rows per source/label/channel"
    )
    parser.add_argument(
        "--carriers",
        action="store_true",
        help="the folds of the recipe with the carriers' rows (its figure goes beside the report)",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    t0 = time.time()
    folds, screened = fold_results(args.epochs, args.cap, args.carriers)
    summary = summarise(folds)
    summary["screen"] = screened
    summary["carriers"] = args.carriers
    summary["recipe"] = {"epochs": folds[0].get("epochs"), "cap_per_cell": folds[0].get("cap_per_cell")}
    from deltaguard.artifacts import manifest_entry

    entry = manifest_entry(spec.ARTIFACT)
    shipped = entry.get("metrics")
    summary["shipped_floor"] = entry.get("screen", {}).get("floor")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "detector_eval.md").write_text(report(summary, shipped, time.time() - t0))
    (args.out / "detector_eval.json").write_text(json.dumps(summary, indent=1))
    figure = args.out / "detector_loso-carriers.png" if args.carriers else FIGURE
    plot(summary, figure)
    log(f"wrote {args.out / 'detector_eval.md'} and {figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

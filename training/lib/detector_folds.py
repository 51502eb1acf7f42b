"""The detector's leave-sources-out folds, as cached evidence.

Each fold fine-tunes the detector recipe (`run_fold` below, training/train_detector.py's training) without
one group of sources (FOLDS), nor any row sharing a group with them, and scores the
held-out sources' rows plus the benign test rows of the sources it trained on. Beside it,
lexical-v3's recipe is fitted on the same fold's rows (`lexical_fold`). Everything is
cached in .cache/detector: eval/detector_eval.py reports the folds, and
training/detector_screen.py chooses the detector's screen floor on them.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_model import serving_model, tokenizer_path, train_and_export
from training.lib.detector_rows import fold_rows
from training.lib.detector_rule import cached_scores, choose_thresholds, score_rows
from training.lib.detector_spec import (
    BASES,
    CAP_PER_CELL,
    DEFAULT_BASE,
    EPOCHS,
    INDIRECT_CHANNELS,
    WORK,
    Base,
    log,
    rows_tag,
)
from training.lib.detector_spec import HEADS as DETECTOR_HEADS
from training.lib.detector_windows import build_windows

# Fine-tuning costs ~10-20 minutes a fold on 2 cores, so sources are held out in groups (a
# stricter test than one at a time: each fold also loses its neighbours' data).
FOLDS = (
    ("s-labs",),
    ("pyrit", "spikee"),
    ("agentdojo", "raginject"),
    ("deepset-fuzzer", "obfuscated", "yanismiraoui"),
)


def fold_dir(
    sources: tuple[str, ...] | list[str], base: Base = BASES[DEFAULT_BASE], carriers: bool = False
) -> Path:
    """A fold's work folder (its model, scores and, beside it, its result as JSON)."""
    return WORK / ("fold-" + "+".join(sorted(sources)) + base.suffix + rows_tag(carriers))


def attack_scores(p: np.ndarray, rows: list[dict[str, Any]], thresholds: dict[str, float]) -> np.ndarray:
    """One score per row: the max over the heads that judge it, each scaled so that its
    threshold is 0.5 (the classifier's own scale: flagged at >= 0.5)."""
    from deltaguard.classifiers.scaled import scale

    indirect = np.array([r["channel"] in INDIRECT_CHANNELS for r in rows])
    scaled = np.array(
        [[scale(float(v), thresholds[h]) for v in p[:, i]] for i, h in enumerate(DETECTOR_HEADS)]
    ).T
    injection = np.where(indirect, scaled[:, 2], scaled[:, 0])
    return np.maximum(injection, scaled[:, 1])


def load_fold(sources: tuple[str, ...], epochs: int, cap: int, carriers: bool = False) -> dict[str, Any]:
    """A fold's scored rows (trained first if it is not cached), with the thresholds
    today's rule picks on its own validation rows and the detector's scores at them
    (`detector`, 0.5 = flagged); `carriers`: the fold of the recipe with the carriers' rows."""
    path = fold_dir(sources, carriers=carriers).with_suffix(".json")
    if not path.exists():
        log(f"{path.stem}: training")
        run_fold(list(sources), epochs, cap, carriers=carriers)
    fold = json.loads(path.read_text())
    if (fold["epochs"], fold["cap_per_cell"]) != (epochs, cap):
        raise SystemExit(
            f"{path} was trained with {fold['epochs']} epoch(s) and cap {fold['cap_per_cell']}, "
            f"not {epochs} and {cap}: pass those, or delete it and {path.with_suffix('')} to retrain"
        )
    _, scored = fold_rows(list(sources), carriers)
    if [r["group"] for r in scored] != [r["group"] for r in fold["rows"]]:
        raise SystemExit(
            f"{path.stem}: the rows changed since the fold was trained "
            f"(delete {path} and {path.with_suffix('')} to retrain it)"
        )
    # The operating point is chosen again with today's rule on the fold's own validation
    # rows: a change of rule needs no retraining.
    validation, p = fold_validation(list(sources), carriers)
    fold["thresholds"] = choose_thresholds(p, validation)
    fold["detector"] = attack_scores(np.array(fold["scores"]), fold["rows"], fold["thresholds"])
    fold["texts"] = [r["text"] for r in scored]
    fold["validation"] = validation
    return fold


def as_rows(rows: list[dict[str, Any]]) -> list[Any]:
    from training.lib.detection_data import Row

    fields = [f.name for f in dataclasses.fields(Row)]
    return [Row(**{k: r[k] for k in fields}) for r in rows]


def lexical_fold(sources: tuple[str, ...], carriers: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """lexical-v3's recipe (with the folds' FOLD_SETTINGS) fitted on a fold's training
    rows: its per-head probabilities on the fold's validation rows and on the rows the
    fold scores, cached beside the fold's detector."""
    cache = fold_dir(sources, carriers=carriers) / "lexical-scores.npz"
    if cache.exists():
        with np.load(cache, allow_pickle=False) as z:
            return z["validation"], z["scored"]
    from training.lib.lexical_fit import FOLD_SETTINGS, HEADS, fit, to_model

    rest, scored = fold_rows(list(sources), carriers)
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


def run_fold(
    sources: list[str],
    epochs: int = EPOCHS,
    cap: int = CAP_PER_CELL,
    base: Base = BASES[DEFAULT_BASE],
    carriers: bool = False,
) -> Path:
    """Train `base` without `sources` (with the carriers' rows, if asked: `load_rows`); save
    their rows' scores and the benign test reference."""
    rest, scored = fold_rows(sources, carriers)
    out = fold_dir(sources, base, carriers)
    result = out.with_suffix(".json")
    tokenizer = tokenizer_path(base)
    windows = build_windows(rest, tokenizer)
    train_and_export(windows, out.name, epochs, base, cap)
    model = serving_model(out, tokenizer)
    validation = [r for r in rest if r["split"] == "validation"]
    p_val = cached_scores(out / "validation-scores.npy", model, validation)
    thresholds = choose_thresholds(p_val, validation)
    p = score_rows(model, scored)
    result.write_text(
        json.dumps(
            {
                "held_out": sources,
                "carriers": carriers,
                "epochs": epochs,
                "cap_per_cell": cap,
                "thresholds": thresholds,
                "n_train_windows": sum(1 for w in windows if w["split"] == "train"),
                "rows": [
                    {k: r[k] for k in ("source", "label", "family", "channel", "group", "split", "fp_set")}
                    for r in scored
                ],
                "scores": p.round(6).tolist(),
            }
        )
    )
    log(f"{out.name}: wrote {result}")
    return result


def fold_validation(sources: list[str], carriers: bool = False) -> tuple[list[dict[str, Any]], np.ndarray]:
    """A trained fold's validation rows and their scores (cached beside its model), so that
    its operating point can be chosen again without training it again."""
    out = fold_dir(sources, carriers=carriers)
    rest, _ = fold_rows(sources, carriers)
    validation = [r for r in rest if r["split"] == "validation"]
    model = serving_model(out, tokenizer_path(BASES[DEFAULT_BASE]))
    return validation, cached_scores(out / "validation-scores.npy", model, validation)

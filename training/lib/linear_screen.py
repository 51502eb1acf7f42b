"""What the recipes of the linear screens share (classifiers/window_screen.py: the detector's
window screen, training/train_window_screen.py, and the notes model's paragraph screen,
training/train_notes_screen.py): the feature matrix, the fit, the cutoff rule, and the
artifact published beside the model entry that serves it.

Each screen learns which units (a window's chunks, a paragraph) its model scores high, and
its cutoff is chosen on attacks from sources its fit never saw: one fold per attack source,
each source's flagged texts judged by a screen fitted without it, the margins pooled.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from deltaguard.classifiers.window_screen import (
    BUCKETS,
    CHUNK_STRIDE,
    CHUNK_TOKENS,
    WindowScreen,
    feature_indices,
)
from training.lib.screen_floor import LOSS_BUDGET

C = 1.0
FORMAT = (
    "npz (allow_pickle=False): weights over a chunk's ids and hashed id pairs, bias, the chunks' "
    "length and stride; see classifiers/window_screen.py"
)


def feature_matrix(units: Sequence[np.ndarray], vocab: int) -> sparse.csr_matrix:
    """One row per unit (a chunk's or a paragraph's content ids): counts of its feature indices."""
    rows = [feature_indices(u, vocab) if len(u) else np.zeros(0, np.int64) for u in units]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    x = sparse.csr_matrix(
        (np.ones(len(indices), np.float32), indices, indptr), shape=(len(rows), vocab + BUCKETS)
    )
    x.sum_duplicates()
    return x


def fit(
    x: sparse.csr_matrix,
    positive: np.ndarray,
    vocab: int,
    c: float = C,
    chunk_tokens: int = CHUNK_TOKENS,
    chunk_stride: int = CHUNK_STRIDE,
) -> WindowScreen:
    """Class-balanced logistic regression over the units; cutoff unset (0)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=c, class_weight="balanced", solver="liblinear", max_iter=200, random_state=0)
    model.fit(x, positive)
    weights = model.coef_[0].astype(np.float32)
    return WindowScreen(weights, float(model.intercept_[0]), vocab, BUCKETS, 0.0, chunk_tokens, chunk_stride)


def choose_cutoff(held_out: dict[str, np.ndarray], budget: float = LOSS_BUDGET) -> float:
    """The largest cutoff that clears at most `budget` of the folds' flags, pooled."""
    pooled = np.sort(np.concatenate(list(held_out.values())))
    return float(pooled[int(budget * len(pooled))])


def fold_evidence(
    held_out: dict[str, np.ndarray], cutoff: float, positive: float, c: float
) -> dict[str, Any]:
    """The manifest's account of a cutoff: the settings, and per fold its flags and those lost."""
    pooled = np.concatenate(list(held_out.values()))
    return {
        "cutoff": round(cutoff, 6),
        "positive": positive,
        "c": c,
        "folds": {g: {"flagged": len(m), "lost": int(np.sum(m < cutoff))} for g, m in held_out.items()},
        "folds_lost": f"{int(np.sum(pooled < cutoff))} of {len(pooled)}",
    }


def publish(
    screen: WindowScreen,
    artifact: tuple[str, str, str],
    owner: str,
    key: str,
    rule: str,
    evidence: dict[str, Any],
    models_dir: Path,
) -> Path:
    """Write the screen (`artifact`: manifest name, version, file), its manifest entry (with the
    sha256 of the owner's model: the scores it learnt), and the owner entry's `key` naming it,
    read-modify-write of that key only. The owner's conformance checks run on the result."""
    from deltaguard.artifacts import manifest_entry, sha256_file
    from training.lib.conformance import publish_entry
    from training.lib.manifest import write_manifest_entry

    name, version, file = artifact
    path = models_dir / file
    screen.save(path)
    fitted_to = manifest_entry(owner, models_dir)["files"]["model"]["sha256"]
    spec = {"file": file, "version": version, "sha256": sha256_file(path), "format": FORMAT}
    write_manifest_entry(spec | {"fitted_to": fitted_to}, name, models_dir)
    entry = dict(manifest_entry(owner, models_dir))
    entry[key] = {"artifact": name, "cutoff": screen.cutoff, "rule": rule, "evidence": evidence}
    publish_entry(entry, owner, (owner,), models_dir)
    return path

"""The detector's screen floor: the largest floor of GRID at which lexical-v3 clears at most
LOSS_BUDGET of the held-out attacks the detector flags on its leave-sources-out folds
(training/lib/detector_folds.py), and `nested`, each fold's floor chosen on the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from training.lib.detector_spec import CAP_PER_CELL, EPOCHS, INDIRECT_CHANNELS

GRID = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.03, 0.05)
LOSS_BUDGET = 0.001  # of the held-out attacks the detector flags


@dataclass(frozen=True)
class FoldEvidence:
    """One fold's rows: lexical-v3's max head probability, and what the detector said."""

    name: str
    lexical: np.ndarray  # per row, max over lexical heads
    caught: np.ndarray  # held-out attack rows the detector flags
    benign: np.ndarray
    indirect: np.ndarray  # tool outputs and documents


def cleared(fold: FoldEvidence, floor: float) -> np.ndarray:
    """The rows the screen clears at `floor`."""
    return fold.lexical < floor


def losses(folds: list[FoldEvidence], floor: float) -> tuple[int, int]:
    """(detector catches the screen clears, detector catches), pooled."""
    lost = sum(int(np.sum(f.caught & cleared(f, floor))) for f in folds)
    return lost, sum(int(f.caught.sum()) for f in folds)


def within_budget(folds: list[FoldEvidence], floor: float, budget: float) -> bool:
    lost, caught = losses(folds, floor)
    return lost <= budget * caught


def choose_floor(
    folds: list[FoldEvidence], grid: tuple[float, ...] = GRID, budget: float = LOSS_BUDGET
) -> float:
    """The largest floor that clears at most `budget` of the detector's catches; 0 (no
    screen) if even the smallest clears more."""
    return max((s for s in grid if within_budget(folds, s, budget)), default=0.0)


def benign_cleared(folds: list[FoldEvidence], floor: float, indirect: bool) -> float:
    """The share of benign user messages (or tool outputs and documents) cleared, pooled."""
    rows = [f.benign & (f.indirect == indirect) for f in folds]
    n = sum(int(m.sum()) for m in rows)
    return sum(int(np.sum(m & cleared(f, floor))) for f, m in zip(folds, rows, strict=True)) / max(n, 1)


def nested(folds: list[FoldEvidence]) -> list[dict[str, Any]]:
    """Each fold with the floor the others choose: the rule's own held-out test."""
    out = []
    for fold in folds:
        floor = choose_floor([f for f in folds if f is not fold])
        lost, caught = losses([fold], floor)
        out.append(
            {
                "fold": fold.name,
                "floor": floor,
                "lost": lost,
                "caught": caught,
                "benign_user_cleared": benign_cleared([fold], floor, False),
                "benign_tool_cleared": benign_cleared([fold], floor, True),
            }
        )
    return out


def fold_evidence(sources: tuple[str, ...], fold: dict[str, Any], lexical: np.ndarray) -> FoldEvidence:
    """From a fold of training/lib/detector_folds.py (`load_fold`) and its lexical-v3
    probabilities (`lexical_fold`) on the rows it scores."""
    rows = fold["rows"]
    held = np.array([r["source"] in sources for r in rows])
    attack = np.array([r["label"] != "benign" for r in rows])
    return FoldEvidence(
        name="+".join(sources),
        lexical=lexical.max(axis=1),
        caught=held & attack & (fold["detector"] >= 0.5),
        benign=~attack,
        indirect=np.array([r["channel"] in INDIRECT_CHANNELS for r in rows]),
    )


def evidence(epochs: int = EPOCHS, cap: int = CAP_PER_CELL) -> list[FoldEvidence]:
    from training.lib.detector_folds import FOLDS, lexical_fold, load_fold

    return [fold_evidence(s, load_fold(s, epochs, cap), lexical_fold(s)[1]) for s in FOLDS]

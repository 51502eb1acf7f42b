"""The window screen's recipe on small made-up evidence: what a flag's critical margin is,
how the folds' margins choose the cutoff, and that the fitted model serves as it was fitted."""

from __future__ import annotations

import numpy as np
import pytest

from deltaguard.classifiers.window_screen import chunk_bounds, feature_indices
from training.lib.linear_screen import choose_cutoff, fit
from training.lib.window_evidence import Chunks, Evidence
from training.train_window_screen import AUTHORED, chunk_matrix, critical, margins, source_group

VOCAB = 50


def evidence(windows: list[list[int]], text: list[int], prob: list[float], injected: list[bool]) -> Evidence:
    ids = [np.array([1, *w, 2], np.int32) for w in windows]  # [CLS] ... [SEP]
    return Evidence(
        ids=np.concatenate(ids),
        starts=np.concatenate([[0], np.cumsum([len(w) for w in ids])]).astype(np.int64),
        text=np.array(text, np.int32),
        prob=np.array(prob),
        source=np.array([f"s{i}" for i in range(len(injected))]),
        injected=np.array(injected),
    )


def test_a_flag_is_lost_only_when_every_flagged_window_of_its_text_is_cleared():
    e = evidence([[3], [4], [5], [6]], text=[0, 0, 1, 2], prob=[0.99, 0.995, 0.2, 0.999], injected=[1, 0, 1])
    crit = critical(e, np.array([-1.0, 2.0, 9.0, -4.0]), threshold=0.98)
    assert crit[0] == 2.0 and np.isnan(crit[1]) and crit[2] == -4.0


def test_the_cutoff_loses_at_most_the_budget_of_the_folds_flags_pooled():
    held_out = {"a": np.array([-3.0, 1.0, 2.0]), "b": np.array([-5.0, 0.5])}
    assert choose_cutoff(held_out, budget=0.0) == -5.0  # nothing lost: at the lowest
    assert choose_cutoff(held_out, budget=0.2) == -3.0  # one of five may go
    assert choose_cutoff(held_out, budget=0.5) == 0.5


def test_every_authors_texts_make_one_fold():
    assert source_group(f"{AUTHORED}-aa") == source_group(f"{AUTHORED}-coding_notes_dev") == AUTHORED
    assert source_group("real-embedded") == "real-embedded"


def test_the_fitted_screen_serves_the_margins_it_was_fitted_on():
    rng = np.random.default_rng(0)
    windows = [list(rng.integers(5, VOCAB, 70)) for _ in range(40)]
    for w in windows[:20]:  # the positives carry an "instruction": ids 3, 4
        w[30:32] = [3, 4]
    e = evidence(
        windows, text=list(range(40)), prob=[0.99] * 20 + [0.0] * 20, injected=[True] * 20 + [False] * 20
    )
    chunks = Chunks(
        window=np.repeat(np.arange(40), 2).astype(np.int32),
        start=np.tile([0, 32], 40).astype(np.int32),
        end=np.tile([32, 64], 40).astype(np.int32),
        prob=np.array([p for w in windows for p in (float(3 in w[0:32]), float(3 in w[32:64]))]),
    )
    x = chunk_matrix(chunks, e, VOCAB)
    screen = fit(x, chunks.prob >= 0.5, VOCAB)
    served = margins(screen, e)
    assert served[:20].min() > served[20:].max()  # the instruction's chunk lifts its window
    # each window's margin is its highest chunk's: the sparse sum over that chunk's features
    for w in (0, 25):
        content = e.window(w)[1:-1]
        best = max(
            screen.weights[feature_indices(content[a:b], VOCAB)].astype(np.float64).sum()
            for a, b in chunk_bounds(len(content))
        )
        assert served[w] == pytest.approx(screen.bias + best)

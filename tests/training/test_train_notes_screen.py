"""The notes model's paragraph screen recipe on small made-up paragraphs: which sources make
folds, that a fold's screen never saw its source, and that the development set is read as
served."""

from __future__ import annotations

import numpy as np

from deltaguard.classifiers.notes import asks
from training.lib.linear_screen import feature_matrix, fit
from training.train_notes_screen import Paragraphs, development_rows, fold_group, folds, margins

VOCAB = 50


def made_up() -> Paragraphs:
    rng = np.random.default_rng(0)
    ids, prob, source = [], [], []
    for s in ("authors-a", "authors-b", "coding-agent", "real-documents"):
        for k in range(30):
            para = rng.integers(5, VOCAB, 20)
            planted = s != "real-documents" and k < 10
            if planted:  # the notes model flags an "instruction": ids 3, 4
                para[8:10] = [3, 4]
            ids.append(para)
            prob.append(0.99 if planted else 0.01)
            source.append(s)
    return Paragraphs(ids, np.array(prob), np.array(source), np.array(["train"] * len(ids)))


def test_every_attack_source_is_a_fold_and_real_text_none():
    assert fold_group("authors-a") == "authors-a" and fold_group("coding-agent") == "coding-agent"
    assert fold_group("real-documents") is None and fold_group("real-tool-outputs") is None


def test_each_fold_scores_the_flags_of_the_source_it_held_out():
    p = made_up()
    held_out = folds(p, feature_matrix(p.ids, VOCAB), VOCAB, threshold=0.9, positive=0.5)
    assert sorted(held_out) == ["authors-a", "authors-b", "coding-agent"]
    assert all(len(m) == 10 for m in held_out.values())
    # The other sources' instructions taught it: the held-out source's flags stand over every
    # real paragraph of a screen fitted on all.
    screen = fit(feature_matrix(p.ids, VOCAB), p.prob >= 0.5, VOCAB)
    real = margins(screen, p.where(p.source == "real-documents"))
    assert min(m.min() for m in held_out.values()) > np.median(real)


def test_the_development_set_is_read_as_served():
    rows = development_rows()
    assert rows and all(asks(r["text"]) for r in rows)
    assert {r["source"] for r in rows} == {"development"} and {r["split"] for r in rows} == {"validation"}

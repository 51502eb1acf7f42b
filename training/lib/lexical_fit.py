"""Fitting a normalised lexical model (lexical-v3 and the detection evaluation's folds).

Texts are read through classifiers/normalize.py exactly as the serving path reads them
(see `expand` for which views train), so that the markers and decoded text the
normaliser produces are learnt from data. One class-balanced logistic regression per head
over word 1-2 gram and char_wb 3-5 gram TF-IDF, Platt-calibrated on validation, exported with
train_lexical.export (plain arrays) plus `"normalize"` in the config.

Heads: prompt_injection learns injection against benign, jailbreak learns jailbreak
against benign; each head leaves the other attack class out (a persona injection is
neither a negative of the jailbreak head nor a positive). Rows are weighted by
1/sqrt(rows of their source and label), so a large source (S-Labs) does not drown the
small ones the model must generalise to.
"""

from __future__ import annotations

import json
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deltaguard.classifiers import normalize
from deltaguard.classifiers.lexical_model import LexicalModel
from training.lib import thresholds
from training.lib.detection_data import Row
from training.lib.log import make_log

HEADS = ("prompt_injection", "jailbreak")
POSITIVE = {"prompt_injection": "injection", "jailbreak": "jailbreak"}
C = 4.0


@dataclass(frozen=True)
class FitSettings:
    """Vectoriser sizes and regularisation; the evaluation's folds use smaller ones."""

    word_features: int = 60000
    char_features: int = 150000
    c: float = C
    max_iter: int = 2000


# The leave-sources-out folds (eval/detection_eval.py, training/lib/detector_folds.py) fit
# dozens of models: smaller vocabularies keep each fold to a few minutes.
FOLD_SETTINGS = FitSettings(word_features=40000, char_features=100000)


log = make_log("lexical-fit")


def expand(rows: Sequence[Row]) -> tuple[list[str], list[int]]:
    """The texts a model trains on and the row each came from.

    A benign row trains on every view (each must score low: the serving path takes the
    max). An attack with an extra view trains on that view only: its primary view is
    what is left once the payload is hidden or encoded (a carrier sentence, a base64
    blob), and labelling that an attack would teach the carrier, not the attack.
    """
    texts, owner = [], []
    for i, row in enumerate(rows):
        v = normalize.views(row.text)
        for view in v.texts() if row.label == "benign" or v.extra is None else [v.extra]:
            texts.append(view)
            owner.append(i)
    return texts, owner


def head_rows(rows: Sequence[Row], head: str) -> list[int]:
    other = "jailbreak" if head == "prompt_injection" else "injection"
    return [i for i, r in enumerate(rows) if r.label != other]


def source_weights(rows: Sequence[Row], index: Sequence[int], y: np.ndarray) -> np.ndarray:
    counts = Counter((rows[i].source, rows[i].label) for i in index)
    w = np.array([counts[(rows[i].source, rows[i].label)] ** -0.5 for i in index])
    pos = y == 1
    w[pos] *= w[~pos].sum() / max(w[pos].sum(), 1e-12)  # classes weigh the same in all
    return w * (len(w) / w.sum())


def fit(train: Sequence[Row], validation: Sequence[Row], settings: FitSettings = FitSettings()):
    """(union, {head: calibrated model}) fitted on `train`, calibrated on `validation`; a head
    without both classes in each is left out."""
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.frozen import FrozenEstimator
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import FeatureUnion

    from training.lib.lexical_export import CHAR_VECTORIZER, WORD_VECTORIZER

    t0 = time.time()
    tr_texts, tr_owner = expand(train)
    va_texts, va_owner = expand(validation)
    word = dict(WORD_VECTORIZER, max_features=settings.word_features)
    char = dict(CHAR_VECTORIZER, max_features=settings.char_features)
    union = FeatureUnion([("word", TfidfVectorizer(**word)), ("char", TfidfVectorizer(**char))], n_jobs=1)
    x_tr = union.fit_transform(tr_texts).tocsr()
    x_va = union.transform(va_texts).tocsr()
    log(f"vectorised {len(tr_texts)} train / {len(va_texts)} validation views ({time.time() - t0:.0f}s)")
    tr_owner_a, va_owner_a = np.array(tr_owner), np.array(va_owner)
    models = {}
    for head in HEADS:
        t1 = time.time()
        keep_tr = set(head_rows(train, head))
        keep_va = set(head_rows(validation, head))
        sel_tr = np.array([i for i, o in enumerate(tr_owner) if o in keep_tr])
        sel_va = np.array([i for i, o in enumerate(va_owner) if o in keep_va])
        y_tr = np.array([train[o].label == POSITIVE[head] for o in tr_owner_a[sel_tr]], dtype=int)
        y_va = np.array([validation[o].label == POSITIVE[head] for o in va_owner_a[sel_va]], dtype=int)
        if len(set(y_tr)) < 2 or len(set(y_va)) < 2:  # a fold that holds out every source of a head
            log(f"{head}: one class only in train or validation, not fitted")
            continue
        w_tr = source_weights(train, tr_owner_a[sel_tr].tolist(), y_tr)
        lr = LogisticRegression(C=settings.c, max_iter=settings.max_iter, tol=1e-6)
        lr.fit(x_tr[sel_tr], y_tr, sample_weight=w_tr)
        cal = CalibratedClassifierCV(FrozenEstimator(lr), method="sigmoid")
        w_va = source_weights(validation, va_owner_a[sel_va].tolist(), y_va)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Since FrozenEstimator", category=UserWarning)
            cal.fit(x_va[sel_va], y_va, sample_weight=w_va)
        models[head] = cal
        log(f"{head}: {int(y_tr.sum())} positive / {len(y_tr)} train views ({time.time() - t1:.0f}s)")
    return union, models


def export(union, models, path: Path, heads: Sequence[str] = HEADS, pieces: bool = False) -> None:
    """train_lexical's artifact format, with the normaliser version in its config, and
    `"pieces": true` for a model that reads untrusted text piece by piece too."""
    from training.lib.lexical_export import export as export_v2

    export_v2(union, models, path, tuple(heads))
    with np.load(path, allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    config = json.loads(str(arrays["config"]))
    config["normalize"] = normalize.VERSION
    if pieces:
        config["pieces"] = True
    arrays["config"] = np.array(json.dumps(config, sort_keys=True))
    np.savez_compressed(path, **arrays)


def to_model(union, models, path: Path, heads: Sequence[str] = HEADS, pieces: bool = False) -> LexicalModel:
    export(union, models, path, heads, pieces)
    return LexicalModel.from_npz(path)


def parity(union, models, model: LexicalModel, texts: Sequence[str], heads: Sequence[str] = HEADS) -> float:
    """Max |sklearn - served| probability on the primary views of `texts` (no chunking)."""
    views = [normalize.primary(t) for t in texts]
    x = union.transform(views)
    ref = np.column_stack([models[h].predict_proba(x)[:, 1] for h in heads])
    ours = np.vstack([model.predict_proba(v) for v in views])
    return float(np.max(np.abs(ref - ours)))


# Per head, on validation, with room under what the pipeline may flag (chat 1%, tool
# outputs 2%, look-alike documents 5%): the heads fire on different texts (jailbreak
# templates hardly ever on documents), so each gets a bit under the whole budget.
FP_BUDGETS = {"chat": 0.005, "prompts": 0.02, "tool": 0.01, "lookalike": 0.04}


def choose_threshold(y: np.ndarray, p: np.ndarray, benign: dict[str, np.ndarray]) -> float:
    """Max F1 on the labelled validation rows, subject to FP_BUDGETS on each benign set: the
    shared rule (thresholds.choose_threshold) over the labelled scores, ties to the higher."""
    return thresholds.choose_threshold(p, benign, FP_BUDGETS, ties="higher", otherwise=1.0, y=y, p=p)

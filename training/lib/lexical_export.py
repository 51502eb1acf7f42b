"""lexical-v2's vectoriser settings and its artifact format: the fitted sklearn union and
heads exported as plain arrays for deltaguard's LexicalModel, and the parity check
between the two.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from deltaguard.classifiers.lexical_model import FORMAT_VERSION, LexicalModel
from training.lib.lexical_spec import HEADS

WORD_VECTORIZER = {
    "analyzer": "word",
    "ngram_range": (1, 2),
    "min_df": 2,
    "max_features": 60000,
    "sublinear_tf": True,
    "lowercase": True,
    "token_pattern": r"(?u)\b\w\w+\b",
    "dtype": np.float64,
}
CHAR_VECTORIZER = {
    "analyzer": "char_wb",
    "ngram_range": (3, 5),
    "min_df": 3,
    "max_features": 150000,
    "sublinear_tf": True,
    "lowercase": True,
    "dtype": np.float64,
}


def export(union, models, path: Path, heads: tuple[str, ...] = HEADS) -> dict[str, float]:
    """Write the npz artifact: vocabularies, idf, folded calibrated coefficients, one row
    per head of `heads` (each a calibrated model in `models`)."""
    word = dict(union.transformer_list)["word"]
    char = dict(union.transformer_list)["char"]
    coefs, intercepts, calib = [], [], {}
    for head in heads:
        cal = models[head]
        if len(cal.calibrated_classifiers_) != 1:
            raise SystemExit("expected one calibrated classifier (FrozenEstimator)")
        inner = cal.calibrated_classifiers_[0]
        lr = inner.estimator.estimator  # FrozenEstimator -> LogisticRegression
        sig = inner.calibrators[0]
        a, b = float(sig.a_), float(sig.b_)
        # p = expit(-(a * (w.x + b0) + b)) = expit(w'.x + b0') with w' = -a w, b0' = -(a b0 + b)
        coefs.append(-a * lr.coef_[0])
        intercepts.append(-(a * float(lr.intercept_[0]) + b))
        calib[head] = {"a": a, "b": b}

    def vocab_array(vec) -> np.ndarray:
        terms = np.empty(len(vec.vocabulary_), dtype=object)
        for term, idx in vec.vocabulary_.items():
            terms[idx] = term
        return np.array(terms.tolist(), dtype=str)

    char_vocab = vocab_array(char)
    if any("\x00" in g for g in char_vocab.tolist()):
        raise SystemExit("a char n-gram contains NUL, which the numpy unicode array cannot keep")
    # The settings the vectorisers were fitted with (the keys of the module's defaults).
    config = {
        name: {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in vec.get_params().items()
            if k in defaults and k != "dtype"
        }
        for name, vec, defaults in (("word", word, WORD_VECTORIZER), ("char", char, CHAR_VECTORIZER))
    }
    for block in config.values():
        block["norm"] = "l2"
        block["use_idf"] = True
        block["smooth_idf"] = True
    np.savez_compressed(
        path,
        format_version=np.array(FORMAT_VERSION, dtype=np.int64),
        config=np.array(json.dumps(config, sort_keys=True)),
        heads=np.array(heads),
        word_vocab=vocab_array(word),
        word_idf=word.idf_.astype(np.float64),
        char_vocab=char_vocab,
        char_idf=char.idf_.astype(np.float64),
        coef=np.vstack(coefs).astype(np.float64),
        intercept=np.array(intercepts, dtype=np.float64),
    )
    return calib


def parity(union, models, model: LexicalModel, texts: list[str]) -> float:
    """Max |sklearn predict_proba - numpy predict_proba| over `texts`, all heads."""
    x = union.transform(texts)
    ref = np.column_stack([models[h].predict_proba(x)[:, 1] for h in HEADS])
    ours = np.vstack([model.predict_proba(t) for t in texts])
    return float(np.max(np.abs(ref - ours)))

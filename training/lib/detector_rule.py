"""The detector's operating point and metrics: scores through the serving path, per head the
most sensitive threshold within FP_BUDGETS on each benign validation set, the
per-conversation rule on real agent traffic (`conversation_maxima`, routed as the default
set serves items), and test recall and flag rates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_spec import (
    CONVERSATION_BUDGET,
    FP_BUDGETS,
    HEADS,
    INDIRECT_CHANNELS,
    NORMALIZE,
)
from training.lib.thresholds import flagged_share, most_sensitive_threshold, per_kind_floor


def served_text(row: dict[str, Any]) -> str:
    """The text the serving path reads: a user message's paths masked, as
    classifiers/encoder.py does (MASKED_ROLES), untrusted content as it is."""
    from deltaguard.classifiers.identifiers import mask_paths

    return row["text"] if row["channel"] in INDIRECT_CHANNELS else mask_paths(row["text"])


def score_rows(model, rows: list[dict[str, Any]]) -> np.ndarray:
    """Item probabilities per head through the serving path (max over views and windows)."""
    from deltaguard.classifiers import normalize

    return model.score_views([normalize.views(served_text(r), NORMALIZE).texts() for r in rows])


def cached_scores(path: Path, model, rows: list[dict[str, Any]]) -> np.ndarray:
    """score_rows, kept beside the model it came from (a rerun after a failure is quick)."""
    if path.exists():
        p = np.load(path, allow_pickle=False)
        if len(p) == len(rows):
            return p
    p = score_rows(model, rows)
    np.save(path, p, allow_pickle=False)
    return p


def category_scores(p: np.ndarray, rows: list[dict[str, Any]]) -> np.ndarray:
    """(rows x 2): prompt_injection from the head of the row's channel, and jailbreak."""
    indirect = np.array([r["channel"] in INDIRECT_CHANNELS for r in rows])
    return np.stack([np.where(indirect, p[:, 2], p[:, 0]), p[:, 1]], axis=1)


def judges(row: dict[str, Any], h: int) -> bool:
    """Whether head `h` judges the row when served: a tool output or document by the indirect
    head alone (a jailbreak is a principal's act: classifiers/base.py PRINCIPAL_ONLY), a
    principal's message by the direct and jailbreak heads."""
    return (row["channel"] in INDIRECT_CHANNELS) == (HEADS[h] == "indirect_injection")


def choose_thresholds(p: np.ndarray, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per head: thresholds.most_sensitive_threshold within FP_BUDGETS over the benign
    validation rows it judges when served (`judges`)."""
    out = {}
    for h, head in enumerate(HEADS):
        judged = [i for i, r in enumerate(rows) if r["label"] == "benign" and judges(r, h)]
        benign = {}
        for s in FP_BUDGETS:
            idx = [i for i in judged if rows[i]["fp_set"] == s]
            if idx:
                benign[s] = (p[idx, h], [rows[i]["group"] for i in idx])
        out[head] = most_sensitive_threshold(benign, FP_BUDGETS)
    return out


def agent_conversations(split: str) -> list[tuple[str, list[str], list[str]]]:
    """The split's real agent conversations as (kind, user messages, tool outputs)."""
    from training.lib.agent_traffic import conversation_texts

    return [(kind, user, tool) for kind, user, tool, _answers in conversation_texts(split)]


def conversation_maxima(model, convs: list[tuple[str, list[str], list[str]]]) -> tuple[list[str], np.ndarray]:
    """Per conversation and head, the highest score of the items that head judges, routed as
    the default set serves them (classifiers/registry.py): user messages by the direct and
    jailbreak heads; tool outputs by the indirect head alone (untrusted content is never a
    jailbreak, classifiers/base.py PRINCIPAL_ONLY); user messages of LONG_USER_CHARS or more
    (pasted documents, the user's own) by the indirect and jailbreak heads."""
    from deltaguard.classifiers.registry import LONG_USER_CHARS

    routed = []  # (short user messages, tool outputs, pasted documents) per conversation
    for _, said, read in convs:
        pasted = [x for x in said if len(x) >= LONG_USER_CHARS]
        routed.append(([x for x in said if len(x) < LONG_USER_CHARS], read, pasted))
    unique = sorted(
        {(x, "user") for user, _, _ in routed for x in user}
        | {(x, "tool") for _, read, pasted in routed for x in [*read, *pasted]}
    )
    p = score_rows(model, [{"text": x, "channel": channel} for x, channel in unique])
    index = {key: i for i, key in enumerate(unique)}

    def rows(texts: list[str], channel: str) -> np.ndarray:
        return p[[index[x, channel] for x in texts]] if texts else np.zeros((0, len(HEADS)))

    out = np.zeros((len(convs), len(HEADS)))
    for c, (user, read, pasted) in enumerate(routed):
        u, r, d = rows(user, "user"), rows(read, "tool"), rows(pasted, "tool")
        out[c, 0] = u[:, 0].max(initial=0.0)
        out[c, 1] = np.concatenate([u, d])[:, 1].max(initial=0.0)
        out[c, 2] = np.concatenate([r, d])[:, 2].max(initial=0.0)
    return [k for k, _, _ in convs], out


def conversation_thresholds(
    kinds: list[str], maxima: np.ndarray, budget: float = CONVERSATION_BUDGET
) -> dict[str, float]:
    """Per head, the lowest threshold at which no agent kind has more than `budget` of its
    conversations flagged by that head."""
    return {head: per_kind_floor(kinds, maxima[:, h], budget) for h, head in enumerate(HEADS)}


def conversation_rates(
    kinds: list[str], maxima: np.ndarray, thresholds: dict[str, float]
) -> dict[str, float]:
    """The share of each kind's conversations that some head flags at `thresholds`."""
    return flagged_share(kinds, (maxima >= np.array([thresholds[h] for h in HEADS])).any(axis=1))


def test_metrics(p: np.ndarray, rows: list[dict[str, Any]], thresholds: dict[str, float]) -> dict[str, Any]:
    """Recall per source and flag rate per benign set on the test split at the thresholds,
    each row flagged as served: by any head that `judges` it."""
    flagged = np.zeros(len(rows), dtype=bool)
    for h, head in enumerate(HEADS):
        judged = np.array([judges(r, h) for r in rows], dtype=bool)
        flagged |= judged & (p[:, h] >= thresholds[head])
    out: dict[str, Any] = {"recall": {}, "flag_rate": {}}
    for key in sorted({(r["source"], r["label"]) for r in rows if r["label"] != "benign"}):
        idx = [i for i, r in enumerate(rows) if (r["source"], r["label"]) == key]
        out["recall"]["/".join(key)] = {"n": len(idx), "recall": round(float(flagged[idx].mean()), 4)}
    for s in sorted({r["fp_set"] for r in rows if r["fp_set"]}):
        idx = [i for i, r in enumerate(rows) if r["fp_set"] == s]
        out["flag_rate"][s] = {"n": len(idx), "rate": round(float(flagged[idx].mean()), 4)}
    return out

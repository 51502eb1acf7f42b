"""lexical-v2's threshold rule and metrics (the frozen encoder's and eval/quality.py's too):
per head, max F1 on validation with the FPR on each benign set within
CHITCHAT_FPR_BUDGET.
"""

from __future__ import annotations

import numpy as np

from deltaguard.classifiers.lexical_model import LexicalModel
from training.lib import thresholds as threshold_rule
from training.lib.lexical_corpus import (
    Corpus,
)
from training.lib.lexical_spec import HEADS
from training.lib.stdlib_code import (
    CODE_SHAPES,
)
from training.lib.tool_outputs import (
    TOOL_KINDS,
)

CHITCHAT_FPR_BUDGET = 0.01  # threshold constraint: FPR on each of FPR_BUDGET_SOURCES (validation)
FPR_BUDGET_SOURCES = ("chitchat", "chitchat_transcript", "stdlib_code")  # those present

# Benign-only sources: reported as FPRs, not in a head's "labelled" benchmark set.
BENIGN_ONLY_SOURCES = ("chitchat", "chitchat_transcript", "stdlib_code", "tool_output", "harness_note")


def choose_threshold(y: np.ndarray, p: np.ndarray, benign: list[np.ndarray]) -> float:
    """Max F1 on the labelled validation set, subject to FPR <= CHITCHAT_FPR_BUDGET on each
    benign set: the shared rule (thresholds.choose_threshold) over the labelled and benign
    scores, ties to the lower."""
    sets = {str(i): q for i, q in enumerate(benign)}
    budgets = dict.fromkeys(sets, CHITCHAT_FPR_BUDGET)
    candidates = np.concatenate([p, *benign])
    return threshold_rule.choose_threshold(candidates, sets, budgets, ties="lower", otherwise=0.5, y=y, p=p)


def binary_metrics(y: np.ndarray, p: np.ndarray, t: float) -> dict[str, float | int]:
    from sklearn.metrics import roc_auc_score

    pred = p >= t
    tp = int(np.sum(pred & (y == 1)))
    fp = int(np.sum(pred & (y == 0)))
    fn = int(np.sum(~pred & (y == 1)))
    tn = int(np.sum(~pred & (y == 0)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    return {
        "n": len(y),
        "positives": int(np.sum(y == 1)),
        "roc_auc": round(float(roc_auc_score(y, p)), 4),
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(2 * precision * recall / (precision + recall), 4) if precision + recall else 0.0,
        "fpr": round(fp / (fp + tn), 4) if fp + tn else 0.0,
    }


def rate(p: np.ndarray, t: float) -> float:
    return round(float(np.mean(p >= t)), 4) if len(p) else 0.0


def evaluate(corpus: Corpus, model: LexicalModel) -> tuple[dict[str, float], dict]:
    heads_ix = {h: i for i, h in enumerate(HEADS)}
    cache: dict[str, np.ndarray] = {}

    def scores(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), len(HEADS)))
        for i, t in enumerate(texts):
            if t not in cache:
                cache[t] = model.score(t)
            out[i] = cache[t]
        return out

    thresholds: dict[str, float] = {}
    metrics: dict = {}
    for head in HEADS:
        k = heads_ix[head]
        va = corpus.heads[head]["validation"]
        labelled = ~va.mask(*BENIGN_ONLY_SOURCES)
        p_va = scores(va.texts)[:, k]
        benign = [p_va[va.mask(src)] for src in FPR_BUDGET_SOURCES if va.mask(src).any()]
        thresholds[head] = round(choose_threshold(va.y()[labelled], p_va[labelled], benign), 6)

    for head in HEADS:
        k, t = heads_ix[head], thresholds[head]
        metrics[head] = {}
        for split in ("validation", "test"):
            ds = corpus.heads[head][split]
            p = scores(ds.texts)[:, k]
            y = ds.y()
            labelled = ~ds.mask(*BENIGN_ONLY_SOURCES)
            m = {
                "labelled": binary_metrics(y[labelled], p[labelled], t),
                "chitchat_fpr": rate(p[ds.mask("chitchat")], t),
                "chitchat_messages": int(np.sum(ds.mask("chitchat"))),
                "chitchat_transcript_fpr": rate(p[ds.mask("chitchat_transcript")], t),
                "chitchat_transcripts": int(np.sum(ds.mask("chitchat_transcript"))),
                "all_sources": binary_metrics(y, p, t),
                "flag_rate_by_source": {
                    f"{src}/{lab}": rate(p[ds.mask(src) & (y == lab)], t)
                    for src in sorted(set(ds.sources))
                    for lab in (0, 1)
                    if np.any(ds.mask(src) & (y == lab))
                },
            }
            if corpus.code:
                chunks = corpus.code[split]
                p_code = scores([c.text for c in chunks])[:, k]
                shapes = np.array([c.shape for c in chunks])
                m["code_fpr"] = rate(p_code, t)
                m["code_chunks"] = len(chunks)
                m["code_fpr_by_shape"] = {sh: rate(p_code[shapes == sh], t) for sh in CODE_SHAPES}
                outputs = corpus.tool_outputs[split]
                p_tool = scores([x for _, x in outputs])[:, k]
                kinds = np.array([kind for kind, _ in outputs])
                notes = kinds == "harness_note"
                m["tool_output_fpr"] = rate(p_tool[~notes], t)
                m["tool_outputs"] = int(np.sum(~notes))
                m["harness_note_fpr"] = rate(p_tool[notes], t)
                m["harness_notes"] = int(np.sum(notes))
                if head == "prompt_injection":
                    plain = shapes == "plain"
                    p_emb = scores(corpus.embedded_in_code[split])[:, k]
                    m["embedded_in_code_vs_code"] = binary_metrics(
                        np.r_[
                            np.ones(len(p_emb), dtype=np.int64), np.zeros(int(plain.sum()), dtype=np.int64)
                        ],
                        np.r_[p_emb, p_code[plain]],
                        t,
                    )
                m["tool_output_fpr_by_kind"] = {
                    kind: rate(p_tool[kinds == kind], t) for kind in (*TOOL_KINDS, "harness_note")
                }
            if head == "jailbreak":
                per_t: dict[str, list[float]] = {}
                for (tmpl, _text), prob in zip(
                    corpus.jailbreak_by_template[split],
                    scores([x for _, x in corpus.jailbreak_by_template[split]])[:, k],
                    strict=True,
                ):
                    per_t.setdefault(tmpl, []).append(float(prob >= t))
                recalls = {tmpl: round(float(np.mean(v)), 3) for tmpl, v in sorted(per_t.items())}
                m["held_out_templates"] = len(recalls)
                m["templates_detected_majority"] = sum(r >= 0.5 for r in recalls.values())
                m["per_template_recall"] = recalls
                m["slabs_injections_flagged"] = rate(scores(corpus.slabs_injections[split])[:, k], t)
            else:
                jb = [x for _, x in corpus.jailbreak_by_template[split]]
                m["pyrit_jailbreaks_flagged"] = rate(scores(jb)[:, k], t)
                benchmark = ds.mask("slabs")
                m["slabs_benchmark"] = binary_metrics(y[benchmark], p[benchmark], t)
                p_emb = scores(corpus.embedded_injections[split])[:, k]
                p_conv = p[ds.mask("chitchat_transcript")]
                m["embedded_vs_transcripts"] = binary_metrics(
                    np.r_[np.ones(len(p_emb), dtype=np.int64), np.zeros(len(p_conv), dtype=np.int64)],
                    np.r_[p_emb, p_conv],
                    t,
                )
            metrics[head][split] = m
    return thresholds, metrics

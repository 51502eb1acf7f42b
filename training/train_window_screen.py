"""The detector's window screen: `python -m training.train_window_screen` (about 17 minutes on
2 cores once the windows are scored, a fold per attack source; scoring them takes about 18
minutes, cached).

The detector reads every window of every tool output, and on real agent traffic its item
screen clears almost nothing (2% of outputs). Yet nearly every window of real code, logs and
prose scores far under the detector's threshold. The window screen (classifiers/
window_screen.py) judges a window by its chunks, a linear model over each chunk's token
ids. This recipe fits it on chunks of the train split's untrusted content (training/lib/
window_evidence.py: the detection corpus' tool outputs and documents, texts written for
coding agents, real agent tool outputs, and the optional rows the detector trained on: the
carriers', a later round's mined windows), each labelled by the detector reading it alone
(POSITIVE or more), and chooses the cutoff under which a window is cleared the way the item
screen's floor is chosen (training/detector_screen.py), on attacks from sources it never saw:

- one fold per attack source of the train split (the texts written for coding agents are
  one source): a screen fitted without that source's chunks, and the margins of that
  source's train and validation texts the detector flags (a text keeps its flag while one
  window the detector flags stays over the cutoff);
- the cutoff is the largest at which at most LOSS_BUDGET of those flags, pooled over the
  folds, would be lost (training/lib/screen_floor.py's budget);
- the screen fitted on every source serves at that cutoff; the figures on the validation and
  test splits (flags lost, real agent windows cleared) go to the manifest beside the folds'.

Writes models/window-screen-v2.npz, its manifest entry, and the detector entry's
`window_screen` (read-modify-write of that key only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from scipy import sparse

from deltaguard.classifiers.window_screen import WindowScreen
from training.lib.detector_spec import ARTIFACT, MODELS_DIR
from training.lib.linear_screen import C, choose_cutoff, feature_matrix, fit, fold_evidence, publish
from training.lib.screen_floor import LOSS_BUDGET
from training.lib.window_evidence import (
    HEAD,
    TRAFFIC_SOURCE,
    Chunks,
    Evidence,
    collect,
    collect_chunks,
    log,
)

NAME = "window-screen"
VERSION = "2"
FILE = f"window-screen-v{VERSION}.npz"
POSITIVE = 0.1  # chunks the detector scores this high, read alone, are the screen's positives
AUTHORED = "coding-notes"  # every author's texts make one fold: the folds hold out kinds of attack


def source_group(source: str) -> str:
    return AUTHORED if source.startswith(f"{AUTHORED}-") else source


def chunk_matrix(chunks: Chunks, evidence: Evidence, vocab: int) -> sparse.csr_matrix:
    """One row per chunk: counts of its feature indices."""
    return feature_matrix([chunks.ids(evidence, c) for c in range(len(chunks.prob))], vocab)


def margins(screen: WindowScreen, evidence: Evidence, windows: np.ndarray | None = None) -> np.ndarray:
    """The serving path's margin of each window (all, or the selected)."""
    chosen = range(len(evidence.prob)) if windows is None else np.flatnonzero(windows)
    out = np.full(len(evidence.prob), np.nan)
    for w in chosen:
        out[w] = screen.margin(evidence.window(w))
    return out


def critical(evidence: Evidence, m: np.ndarray, threshold: float) -> np.ndarray:
    """Per text the detector flags (a window at `threshold` or more), the highest margin of
    those windows: a cutoff above it clears the text's flag. NaN for texts not flagged."""
    out = np.full(len(evidence.source), np.nan)
    for w in np.flatnonzero(evidence.prob >= threshold):
        t = evidence.text[w]
        out[t] = m[w] if np.isnan(out[t]) else max(out[t], m[w])
    return out


def folds(
    splits: dict[str, Evidence],
    chunks: Chunks,
    x: sparse.csr_matrix,
    vocab: int,
    threshold: float,
    positive: float = POSITIVE,
    c: float = C,
) -> dict[str, np.ndarray]:
    """Per attack source of the train split, the critical margins of its flagged train and
    validation texts under a screen fitted without its chunks."""
    train = splits["train"]
    groups = np.array([source_group(s) for s in train.source])
    chunk_group = groups[train.text[chunks.window]]
    out = {}
    for group in sorted(set(groups[train.injected])):
        keep = chunk_group != group
        screen = fit(x[keep], chunks.prob[keep] >= positive, vocab, c)
        found = []
        for split in ("train", "validation"):
            e = splits[split]
            mine = np.array([source_group(s) == group for s in e.source])[e.text]
            crit = critical(e, margins(screen, e, mine & (e.prob >= threshold)), threshold)
            found.append(crit[~np.isnan(crit)])
        out[group] = np.sort(np.concatenate(found))
        lowest = np.round(out[group][:3], 2)
        log(f"  without {group}: {len(out[group])} flagged texts, lowest margins {lowest}")
    return out


def report(evidence: Evidence, screen: WindowScreen, threshold: float) -> dict[str, Any]:
    """Texts flagged and flags lost; windows cleared, overall and of real agent traffic."""
    m = margins(screen, evidence)
    crit = critical(evidence, m, threshold)
    flagged = ~np.isnan(crit)
    traffic = evidence.source[evidence.text] == TRAFFIC_SOURCE
    cleared = m < screen.cutoff
    return {
        "flagged_texts": int(flagged.sum()),
        "flags_lost": int(np.sum(crit[flagged] < screen.cutoff)),
        "windows": len(m),
        "windows_cleared": round(float(cleared.mean()), 4),
        "traffic_windows_cleared": round(float(cleared[traffic].mean()), 4) if traffic.any() else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    parser.add_argument("--positive", type=float, default=POSITIVE, help="the chunks' label threshold")
    parser.add_argument("--c", type=float, default=C, help="inverse regularisation strength")
    parser.add_argument(
        "--models-dir", type=Path, default=MODELS_DIR, help="the models folder whose detector is screened"
    )
    args = parser.parse_args(argv)
    from dataclasses import replace

    from deltaguard.artifacts import manifest_entry
    from deltaguard.classifiers.encoder import EncoderClassifier

    models = args.models_dir
    detector = EncoderClassifier(models, threads=1, artifact=ARTIFACT).load()
    vocab = detector.model.tokenizer.get_vocab_size()
    threshold = float(manifest_entry(ARTIFACT, models)["head_thresholds"][HEAD])
    splits = {s: collect(s, models) for s in ("train", "validation", "test")}
    chunks = collect_chunks("train", splits["train"], models)
    x = chunk_matrix(chunks, splits["train"], vocab)
    log(f"{len(chunks.prob)} chunks, {int(np.sum(chunks.prob >= args.positive))} positive")
    held_out = folds(splits, chunks, x, vocab, threshold, args.positive, args.c)
    cutoff = choose_cutoff(held_out)
    screen = replace(fit(x, chunks.prob >= args.positive, vocab, args.c), cutoff=cutoff)
    evidence: dict[str, Any] = {
        **fold_evidence(held_out, cutoff, args.positive, args.c),
    }
    for s in ("validation", "test"):
        evidence[s] = report(splits[s], screen, threshold)
        log(f"{s}: {json.dumps(evidence[s])}")
    print(json.dumps(evidence, indent=1))
    if not args.dry_run:
        write(screen, evidence, models)
    return 0


def write(screen: WindowScreen, evidence: dict[str, Any], models_dir: Path = MODELS_DIR) -> None:
    rule = (
        f"the largest margin at which <= {LOSS_BUDGET:.1%} of the flags the detector gives the "
        "train and validation texts of an attack source are lost by a screen fitted without "
        "that source, pooled over the sources (python -m training.train_window_screen)"
    )
    path = publish(screen, (NAME, VERSION, FILE), ARTIFACT, "window_screen", rule, evidence, models_dir)
    log(f"wrote {path.name} and the detector's window screen (cutoff {screen.cutoff:.4f})")


if __name__ == "__main__":
    sys.exit(main())

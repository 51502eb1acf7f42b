"""The notes model's paragraph screen: `python -m training.train_notes_screen` (about 10 minutes
on 2 cores, most of it scoring the paragraphs once; cached).

The notes model (classifiers/notes.py) reads every paragraph of a tool output that asks
something, with all six layers of MiniLM: 16-20 ms of CPU per 1,000 tokens of real agent tool
outputs, nearly half of the monitor lane. Yet it scores almost every real asking paragraph far
under its threshold. The paragraph screen is the detector's kind of window screen
(classifiers/window_screen.py) over the notes model's wordpieces: a linear model over the ids
and adjacent pairs of each 32-token chunk of a paragraph, the paragraph taking its highest
chunk's margin. A paragraph under the cutoff scores zero without the model.

It is fitted on the notes model's own training paragraphs (training/lib/notes_rows.py: the
fifteen authors' texts, the templated carriers, the asking paragraphs of real text), each
labelled by the notes model reading it (POSITIVE or more), and served by chunks: an
instruction after a run of test-log dots keeps its weight in its own chunk, where the whole
paragraph's sum would drown it (judged whole, the templated carriers' failing-test logs held
out sat 7 points under every author's notes). The cutoff is chosen on attacks from sources
the fit never saw, under the served margin, as the detector's window screen's is:

- one fold per author and one for the templated carriers: a screen fitted without that
  source's paragraphs, and the margins of that source's paragraphs the notes model flags;
- the cutoff is the largest at which at most LOSS_BUDGET of those flags, pooled over the
  folds, would be lost;
- the screen fitted on every source serves at that cutoff. Reported beside the folds: the
  development set's flags lost (eval/samples/coding_notes_dev.jsonl, never fitted on) and the
  share of the validation and test splits' real asking paragraphs cleared.

Writes models/notes-screen-v1.npz, its manifest entry, and the notes entry's `screen`
(read-modify-write of that key only).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.classifiers.notes import CATEGORY, NOTE_TOKENS, NotesClassifier, asks, paragraphs
from training.lib.detector_spec import MODELS_DIR, WORK
from training.lib.linear_screen import C, choose_cutoff, feature_matrix, fit, fold_evidence, publish
from training.lib.log import make_log
from training.lib.screen_floor import LOSS_BUDGET

NAME = "notes-screen"
VERSION = "1"
FILE = f"notes-screen-v{VERSION}.npz"
OWNER = "notes"
POSITIVE = 0.1  # paragraphs the notes model scores this high are the screen's positives
CACHE = WORK / "notes-screen"  # a folder per notes model: its probabilities are the labels
DEVELOPMENT = Path(__file__).resolve().parents[1] / "eval" / "samples" / "coding_notes_dev.jsonl"
REAL_SAMPLE = 4000  # real asking paragraphs of each held-out split reported on, per kind
AUTHORS = "authors-"
REAL = "real"  # the source prefix of real text's paragraphs (documents, tool outputs, mined)
READ = NOTE_TOKENS - 2  # a paragraph's ids as the model reads them

log = make_log("train_notes_screen")


@dataclass(frozen=True)
class Paragraphs:
    """Paragraphs as the notes model reads them: content ids (its window less [CLS] and
    [SEP]), its probability, the source and the split."""

    ids: list[np.ndarray]
    prob: np.ndarray
    source: np.ndarray
    split: np.ndarray

    def where(self, mask: np.ndarray) -> list[np.ndarray]:
        return [self.ids[i] for i in np.flatnonzero(mask)]


def fold_group(source: str) -> str | None:
    """The fold a source's paragraphs are held out in: each author's, the templated carriers';
    None for real text, which is never held out (it carries no attack)."""
    return None if source.startswith(REAL) else source


def paragraphs_rows() -> list[dict[str, Any]]:
    """The paragraphs: the notes model's training rows, the development set's and a sample of
    the validation and test splits' real asking paragraphs (`split` says which)."""
    from training.lib import notes_rows

    rows = [r | {"split": "train"} for r in notes_rows.authored_rows()]
    rows += [r | {"split": "train"} for r in notes_rows.templated_rows()]
    rows += [r | {"split": "train"} for r in notes_rows.real_rows()]
    rows += development_rows()
    rng = random.Random(NAME)
    for split in ("validation", "test"):
        for found in notes_rows._pools(split):
            rows += [r | {"split": split} for r in rng.sample(found, min(REAL_SAMPLE, len(found)))]
    return rows


def development_rows() -> list[dict[str, Any]]:
    """The asking paragraphs of the development set's texts, as served (classifiers/notes.py)."""
    lines = DEVELOPMENT.read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()]
    spans = [(t, a, b) for t in texts for a, b in paragraphs(t) if asks(t[a:b])]
    return [{"text": t[a:b], "source": "development", "split": "validation"} for t, a, b in spans]


def collect(notes: NotesClassifier, models_dir: Path = MODELS_DIR) -> Paragraphs:
    """The paragraphs and `notes`' probability of each (the model of `models_dir`, loaded
    unscreened), from the cache or scored now."""
    from deltaguard.artifacts import manifest_entry

    sha = manifest_entry(OWNER, models_dir)["files"]["model"]["sha256"]
    path = CACHE / sha[:16] / "paragraphs.npz"
    if path.exists():
        with np.load(path, allow_pickle=False) as z:
            ids = np.split(z["ids"], z["starts"][1:-1])
            return Paragraphs(ids, z["prob"], z["source"], z["split"])
    rows = paragraphs_rows()
    log(f"scoring {len(rows)} paragraphs")
    model = notes.model
    ids = [np.array(model.tokenize(r["text"])[:READ], np.int64) for r in rows]
    texts = [r["text"] for r in rows]
    prob = np.concatenate([notes.read(texts[i : i + 256]) for i in range(0, len(texts), 256)])
    found = Paragraphs(ids, prob, np.array([r["source"] for r in rows]), np.array([r["split"] for r in rows]))
    path.parent.mkdir(parents=True, exist_ok=True)
    starts = np.cumsum([0] + [len(i) for i in ids])
    arrays = {"prob": prob, "source": found.source, "split": found.split}
    np.savez_compressed(path, ids=np.concatenate(ids), starts=starts, **arrays)
    return found


def margins(screen: Any, ids: list[np.ndarray]) -> np.ndarray:
    """The serving path's margin of each paragraph ([CLS] and [SEP] around its content)."""
    return np.array([screen.margin(np.concatenate([[0], i, [0]])) for i in ids])


def folds(
    p: Paragraphs, x: Any, vocab: int, threshold: float, positive: float = POSITIVE, c: float = C
) -> dict[str, np.ndarray]:
    """Per attack source of the train split, the margins of its flagged paragraphs under a
    screen fitted without its paragraphs."""
    train = p.split == "train"
    groups = np.array([fold_group(s) or "" for s in p.source])
    out = {}
    for group in sorted(set(groups[train & (p.prob >= threshold)]) - {""}):
        keep = train & (groups != group)
        screen = fit(x[keep], p.prob[keep] >= positive, vocab, c)
        out[group] = np.sort(margins(screen, p.where(train & (groups == group) & (p.prob >= threshold))))
        lowest = np.round(out[group][:3], 2)
        log(f"  without {group}: {len(out[group])} flagged paragraphs, lowest margins {lowest}")
    return out


def report(p: Paragraphs, screen: Any, threshold: float) -> dict[str, Any]:
    """Development flags lost; real asking paragraphs of the validation and test splits cleared."""
    dev = (p.source == "development") & (p.prob >= threshold)
    out: dict[str, Any] = {
        "development_flagged": int(dev.sum()),
        "development_lost": int(np.sum(margins(screen, p.where(dev)) < screen.cutoff)),
    }
    for split in ("validation", "test"):
        real = (p.split == split) & np.char.startswith(p.source.astype(str), REAL)
        out[f"{split}_real_paragraphs"] = int(real.sum())
        cleared = margins(screen, p.where(real)) < screen.cutoff
        out[f"{split}_real_cleared"] = round(float(cleared.mean()), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="fit and report, write nothing")
    parser.add_argument("--positive", type=float, default=POSITIVE, help="the paragraphs' label threshold")
    parser.add_argument("--c", type=float, default=C, help="inverse regularisation strength")
    args = parser.parse_args(argv)
    from deltaguard.artifacts import manifest_entry

    notes = NotesClassifier(MODELS_DIR, threads=2, screen=False).load()
    vocab = notes.model.tokenizer.get_vocab_size()
    threshold = float(manifest_entry(OWNER, MODELS_DIR)["thresholds"][CATEGORY])
    p = collect(notes)
    train = p.split == "train"
    x = feature_matrix(p.ids, vocab)
    log(f"{int(train.sum())} training paragraphs, {int(np.sum(train & (p.prob >= args.positive)))} positive")
    held_out = folds(p, x, vocab, threshold, args.positive, args.c)
    cutoff = choose_cutoff(held_out)
    screen = replace(fit(x[train], p.prob[train] >= args.positive, vocab, args.c), cutoff=cutoff)
    evidence: dict[str, Any] = {
        **fold_evidence(held_out, cutoff, args.positive, args.c),
        **report(p, screen, threshold),
    }
    print(json.dumps(evidence, indent=1))
    if not args.dry_run:
        rule = (
            f"the largest margin at which <= {LOSS_BUDGET:.1%} of the paragraphs the notes model flags "
            "among an attack source's (each author's, the templated carriers') are lost by a screen "
            "fitted without that source, pooled over the sources (python -m training.train_notes_screen)"
        )
        path = publish(screen, (NAME, VERSION, FILE), OWNER, "screen", rule, evidence, MODELS_DIR)
        log(f"wrote {path.name} and the notes entry's screen (cutoff {cutoff:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The detector's training windows: one window of at most WINDOW_TOKENS tokens per row (the
attack's span, or lexical-v3's highest-scoring window), capped and weighted per source.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_rows import (
    head_targets,
    training_view,
)
from training.lib.detector_spec import (
    CAP_PER_CELL,
    HEADS,
    MODELS_DIR,
    SEED,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    log,
)


def diff_span(text: str, clean: str) -> tuple[int, int]:
    """The character span of `text` that is not shared with `clean` at either end."""
    lo = 0
    while lo < min(len(text), len(clean)) and text[lo] == clean[lo]:
        lo += 1
    hi = 0
    while hi < min(len(text), len(clean)) - lo and text[-1 - hi] == clean[-1 - hi]:
        hi += 1
    return lo, max(lo + 1, len(text) - hi)


def build_windows(rows: list[dict[str, Any]], tokenizer_path: Path) -> list[dict[str, Any]]:
    """One training window per train row (token ids, targets, weight inputs)."""
    from tokenizers import Tokenizer

    from deltaguard.classifiers.encoder_model import special_ids
    from deltaguard.classifiers.lexical import LexicalClassifier

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = special_ids(tok)
    content = WINDOW_TOKENS - 2
    clean_of: dict[tuple[str, str], str] = {}
    for r in rows:
        if r["label"] == "benign":
            clean_of.setdefault((r["source"], r["group"]), r["text"])
    lexical = LexicalClassifier(MODELS_DIR, artifact="lexical-v3").load()  # the screen's model
    out: list[dict[str, Any]] = []
    pending: list[tuple[int, list[tuple[int, int]], str, list[int]]] = []
    for r in rows:
        if r["split"] != "train":
            continue
        view = training_view(r["text"])
        enc = tok.encode(view, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
        if not ids:
            continue
        start = 0
        if len(ids) > content:
            starts = [*range(0, len(ids) - content + 1, WINDOW_STRIDE), len(ids) - content]
            clean = clean_of.get((r["source"], r["group"]))
            if r["label"] != "benign" and clean is not None and clean != r["text"]:
                lo, hi = diff_span(view, training_view(clean))
                first = next((i for i, (a, b) in enumerate(offsets) if b > lo), 0)
                last = next((i for i, (a, b) in enumerate(offsets) if a >= hi), len(ids))
                mid = (first + last) // 2
                start = min(max(0, mid - content // 2), len(ids) - content)
            else:
                pending.append((len(out), offsets, view, starts))
        out.append(
            {
                "ids": [cls_id, *ids[start : start + content], sep_id],
                "targets": head_targets(r),
                "source": r["source"],
                "label": r["label"],
                "channel": r["channel"],
                "group": r["group"],
                "split": r["split"],
                "fp_set": r["fp_set"],
                "all_ids": ids if pending and pending[-1][0] == len(out) else None,
            }
        )
    # Benign rows, and attack rows with no clean twin: the window lexical-v3 finds most
    # suspicious (for benign rows, the hardest negative: the quoted attack of a security
    # article, the imperative step of a runbook).
    texts, owners = [], []
    for index, offsets, view, starts in pending:
        for s in starts:
            a = offsets[s][0]
            b = offsets[min(s + content, len(offsets)) - 1][1]
            texts.append(view[a:b])
            owners.append((index, s))
    if texts:
        scores = lexical._require_model().score_many(texts).max(axis=1)
        best: dict[int, tuple[float, int]] = {}
        for (index, s), score in zip(owners, scores, strict=True):
            if index not in best or score > best[index][0]:
                best[index] = (float(score), s)
        for index, (_score, s) in best.items():
            ids = out[index]["all_ids"]
            out[index]["ids"] = [cls_id, *ids[s : s + content], sep_id]
    for w in out:
        w.pop("all_ids")
    log(f"{len(out)} windows ({len(pending)} chosen by lexical-v3)")
    return out


def cap_training(windows: list[dict[str, Any]], cap: int = CAP_PER_CELL) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for w in windows:
        cells[(w["source"], w["label"], w["channel"])].append(w)
    out = []
    for key in sorted(cells):
        cell = cells[key]
        out += cell if len(cell) <= cap else random.Random(f"{SEED}{key}").sample(cell, cap)
    return out


def weights(windows: list[dict[str, Any]]) -> np.ndarray:
    """Per window and head (its `targets`, NaN where a head has no say): each class of each
    head carries half the head's weight, and within a class a source weighs sqrt of its
    size (many sources, none dominating); a head's weights average 1 where it has a say."""
    heads = len(windows[0]["targets"]) if windows else len(HEADS)
    w = np.zeros((len(windows), heads))
    for h in range(heads):
        cells = Counter((x["targets"][h], x["source"]) for x in windows if not math.isnan(x["targets"][h]))
        for y in (0.0, 1.0):
            members = {s: n for (t, s), n in cells.items() if t == y}
            if not members:
                continue
            total = sum(math.sqrt(n) for n in members.values())
            for i, x in enumerate(windows):
                if x["targets"][h] == y:
                    n = members[x["source"]]
                    w[i, h] = math.sqrt(n) / total / n
        w[:, h] /= max(w[:, h].sum(), 1e-12) / max(1, np.count_nonzero(w[:, h]))
    return w

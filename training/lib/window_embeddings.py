"""Window embeddings of texts through an encoder's serving path (tokenize, windows, embed),
cached on disk: the frozen encoder's heads are fitted on them, and eval/quality.py scores
with them.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np

from training.lib.log import make_log

# The encoder recipe's work directory, where its window embeddings are cached per model.
WORK = Path(__file__).resolve().parents[2] / ".cache" / "encoder"
log = make_log("window_embeddings")


class WindowEmbeddings:
    """Window embeddings of texts through the serving path, cached on disk per model hash."""

    def __init__(self, model, cache_file: Path) -> None:
        self.model = model
        self.cache_file = cache_file
        self.rows: dict[str, np.ndarray] = {}
        if cache_file.exists():
            with np.load(cache_file, allow_pickle=False) as npz:
                keys, offsets, emb = npz["keys"], npz["offsets"], npz["emb"]
            for i, key in enumerate(keys.tolist()):
                self.rows[key] = emb[offsets[i] : offsets[i + 1]]

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()

    def ensure(self, texts: list[str]) -> None:
        todo = sorted({t for t in texts if self.key(t) not in self.rows})
        step = 2000
        for lo in range(0, len(todo), step):
            t0 = time.time()
            part = todo[lo : lo + step]
            windows, spans = [], []
            for text in part:
                ids = self.model.tokenize(text)
                w = self.model.windows(ids, (), None) if ids else []
                spans.append((len(windows), len(windows) + len(w)))
                windows.extend(w)
            emb = self.model.embed(windows) if windows else np.zeros((0, 384), np.float32)
            for text, (a, b) in zip(part, spans, strict=True):
                self.rows[self.key(text)] = emb[a:b]
            took = time.time() - t0
            log(f"embedded {lo + len(part)}/{len(todo)} texts ({len(windows)} windows, {took:.0f}s)")
            self.save()

    def save(self) -> None:
        keys = list(self.rows)
        sizes = [len(self.rows[k]) for k in keys]
        offsets = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        emb = np.vstack([self.rows[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)
        tmp = self.cache_file.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), offsets=offsets, emb=emb)
        os.replace(tmp, self.cache_file)

    def windows_of(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Stacked window embeddings and, per window, the index of its text."""
        rows = [self.rows[self.key(t)] for t in texts]
        owner = np.repeat(np.arange(len(texts)), [len(r) for r in rows])
        return np.vstack(rows), owner


def item_max(values: np.ndarray, owner: np.ndarray, n_items: int) -> np.ndarray:
    """Per-item max over windows (items without windows get -inf)."""
    out = np.full(n_items, -np.inf)
    np.maximum.at(out, owner, values)
    return out

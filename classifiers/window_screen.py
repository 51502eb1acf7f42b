"""The detector's window screen: which windows of untrusted content the detector need not read.

A window is read as overlapping chunks of CHUNK_TOKENS ids, about a sentence or two: a
linear model over a chunk's ids (the wordpieces the detector reads, and their adjacent
pairs hashed into BUCKETS) gives its margin, and the window takes its highest chunk's. A
window whose margin is under the cutoff is cleared: it scores zero without the encoder.
The model is trained on chunks the detector reads alone, to find the ones it scores high
(training/train_window_screen.py); judged by its chunks, an instruction inside a window of
code counts as much as it would alone. It clears most of the code, logs and prose an
agent's tools return, where the item screen (a lexical model over the whole item) clears
almost nothing: somewhere in a long real output there is always a phrase it cannot rule out.

The decision is the window's alone, from its ids alone, so a window is cleared or read the
same way whatever item, turn or call it comes in: delta mode still equals full mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from deltaguard.errors import ModelArtifactError

FORMAT_VERSION = 1
BUCKETS = 1 << 18  # hashed id pairs, beside one weight per vocabulary id
_MIX = 0x9E3779B1  # Knuth's multiplicative hash; products stay under 2**63
CHUNK_TOKENS = 32  # a window is judged by its chunks: an instruction is a sentence or two
CHUNK_STRIDE = 16


def chunk_bounds(n: int) -> list[tuple[int, int]]:
    """[start, end) of the overlapping chunks of n content ids (one chunk if n is short)."""
    if n <= CHUNK_TOKENS:
        return [(0, n)]
    starts = [*range(0, n - CHUNK_TOKENS, CHUNK_STRIDE), n - CHUNK_TOKENS]
    return [(a, a + CHUNK_TOKENS) for a in starts]


def feature_indices(content: np.ndarray, vocab: int, buckets: int = BUCKETS) -> np.ndarray:
    """A chunk's features as weight indices, repeats kept (counts): its ids, then each
    adjacent pair hashed to vocab + [0, buckets)."""
    content = np.asarray(content, dtype=np.int64)
    pairs = content[:-1] * vocab + content[1:]
    return np.concatenate([content, vocab + (pairs * _MIX) % (1 << 32) % buckets])


@dataclass(frozen=True)
class WindowScreen:
    """Weights over a chunk's feature_indices and a bias; windows under `cutoff` are cleared."""

    weights: np.ndarray  # float32, vocab + buckets
    bias: float
    vocab: int
    buckets: int
    cutoff: float

    @classmethod
    def from_file(cls, path: Path, cutoff: float) -> WindowScreen:
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data["format_version"])
                weights = np.asarray(data["weights"], dtype=np.float32)
                bias, vocab, buckets = float(data["bias"]), int(data["vocab"]), int(data["buckets"])
        except (OSError, KeyError, ValueError) as exc:
            raise ModelArtifactError(f"cannot read window screen {path}: {exc}") from exc
        if version != FORMAT_VERSION:
            raise ModelArtifactError(f"window screen {path}: format {version}, this reads {FORMAT_VERSION}")
        if weights.shape != (vocab + buckets,):
            raise ModelArtifactError(f"window screen {path}: {weights.shape} weights for {vocab} + {buckets}")
        return cls(weights, bias, vocab, buckets, cutoff)

    def margin(self, ids: np.ndarray) -> float:
        """The window's margin (a logit): its highest chunk's, each chunk's the bias plus its
        features' weights, summed in float64 (the same for the same ids)."""
        content = np.asarray(ids, dtype=np.int64)[1:-1]
        if not len(content):
            return self.bias
        found = feature_indices(content, self.vocab, self.buckets).astype(np.intp)
        weights = self.weights[found].astype(np.float64)
        ids_sum = np.concatenate([[0.0], np.cumsum(weights[: len(content)])])
        pairs_sum = np.concatenate([[0.0], np.cumsum(weights[len(content) :])])
        bounds = np.array(chunk_bounds(len(content)))
        lo, hi = bounds[:, 0], bounds[:, 1]
        sums = ids_sum[hi] - ids_sum[lo] + pairs_sum[hi - 1] - pairs_sum[lo]
        return self.bias + float(sums.max())

    def clears(self, ids: np.ndarray) -> bool:
        return self.margin(ids) < self.cutoff

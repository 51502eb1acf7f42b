"""The detector's window screen: which windows of untrusted content the detector need not read.

A linear model over one window's token ids (the wordpieces the detector reads, and their
adjacent pairs hashed into BUCKETS) gives a margin; a window whose margin is under the
cutoff is cleared: it scores zero without the encoder. It is trained to find every window
the detector scores near its threshold (training/train_window_screen.py), so it clears the
code, logs and prose that make most of an agent's tool outputs, where the item screen
(a lexical model over the whole item) clears almost nothing: somewhere in a long real
output there is always a phrase it cannot rule out.

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


def feature_indices(ids: np.ndarray, vocab: int, buckets: int = BUCKETS) -> np.ndarray:
    """A window's features as weight indices, repeats kept (counts): its content ids
    ([CLS] and [SEP] left out), then each adjacent pair hashed to vocab + [0, buckets)."""
    content = np.asarray(ids, dtype=np.int64)[1:-1]
    pairs = content[:-1] * vocab + content[1:]
    return np.concatenate([content, vocab + (pairs * _MIX) % (1 << 32) % buckets])


@dataclass(frozen=True)
class WindowScreen:
    """Weights over feature_indices and a bias; windows under `cutoff` are cleared."""

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
        """The window's margin (a logit): summed in float64, the same for the same ids."""
        indices = feature_indices(ids, self.vocab, self.buckets)
        return self.bias + float(self.weights[indices].sum(dtype=np.float64))

    def clears(self, ids: np.ndarray) -> bool:
        return self.margin(ids) < self.cutoff

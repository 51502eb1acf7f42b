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

The notes model's paragraph screen (training/train_notes_screen.py) is the same kind of model
over the notes model's wordpieces: a paragraph is its window. An artifact says how it cuts
chunks (format 2; format 1 cuts CHUNK_TOKENS by CHUNK_STRIDE).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.artifacts import verified_path
from deltaguard.errors import ModelArtifactError

FORMAT_VERSION = 2  # 2 names its chunks' length and stride; 1 has the defaults below
BUCKETS = 1 << 18  # hashed id pairs, beside one weight per vocabulary id
_MIX = 0x9E3779B1  # Knuth's multiplicative hash; products stay under 2**63
CHUNK_TOKENS = 32  # a window is judged by its chunks: an instruction is a sentence or two
CHUNK_STRIDE = 16


def chunk_bounds(n: int, size: int = CHUNK_TOKENS, stride: int = CHUNK_STRIDE) -> list[tuple[int, int]]:
    """[start, end) of the overlapping chunks of n content ids (one chunk if n is short)."""
    if n <= size:
        return [(0, n)]
    starts = [*range(0, n - size, stride), n - size]
    return [(a, a + size) for a in starts]


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
    chunk_tokens: int = CHUNK_TOKENS
    chunk_stride: int = CHUNK_STRIDE

    @classmethod
    def from_file(cls, path: Path, cutoff: float) -> WindowScreen:
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data["format_version"])
                if version not in (1, FORMAT_VERSION):
                    reads = f"this reads 1-{FORMAT_VERSION}"
                    raise ModelArtifactError(f"window screen {path}: format {version}, {reads}")
                weights = np.asarray(data["weights"], dtype=np.float32)
                bias, vocab, buckets = float(data["bias"]), int(data["vocab"]), int(data["buckets"])
                chunks = (CHUNK_TOKENS, CHUNK_STRIDE)
                if version >= 2:
                    chunks = (int(data["chunk_tokens"]), int(data["chunk_stride"]))
        except (OSError, KeyError, ValueError) as exc:
            raise ModelArtifactError(f"cannot read window screen {path}: {exc}") from exc
        if weights.shape != (vocab + buckets,):
            raise ModelArtifactError(f"window screen {path}: {weights.shape} weights for {vocab} + {buckets}")
        if not 0 < chunks[1] <= chunks[0]:
            raise ModelArtifactError(f"window screen {path}: chunks of {chunks[0]} by {chunks[1]}")
        return cls(weights, bias, vocab, buckets, cutoff, *chunks)

    def save(self, path: Path) -> None:
        """The artifact (format 2), cutoff aside: the manifest entry that serves it names that."""
        np.savez_compressed(
            path,
            format_version=np.array(FORMAT_VERSION),
            weights=self.weights.astype(np.float32),
            bias=np.array(self.bias),
            vocab=np.array(self.vocab),
            buckets=np.array(self.buckets),
            chunk_tokens=np.array(self.chunk_tokens),
            chunk_stride=np.array(self.chunk_stride),
        )

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
        bounds = np.array(chunk_bounds(len(content), self.chunk_tokens, self.chunk_stride))
        lo, hi = bounds[:, 0], bounds[:, 1]
        sums = ids_sum[hi] - ids_sum[lo] + pairs_sum[hi - 1] - pairs_sum[lo]
        return self.bias + float(sums.max())

    def clears(self, ids: np.ndarray) -> bool:
        return self.margin(ids) < self.cutoff


def load_window_screen(models_dir: Path, spec: Any, where: str, model_sha: str, vocab: int) -> WindowScreen:
    """The screen a model's manifest entry names (`spec`: {"artifact", "cutoff"}), verified:
    its hash, that it was fitted to this model (`model_sha`: it learnt that model's scores)
    and that it reads this tokenizer's `vocab` ids."""
    try:
        artifact, cutoff = str(spec["artifact"]), float(spec["cutoff"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelArtifactError(f"{where}: window screen {spec!r} needs an artifact and a cutoff") from exc
    path, fitted = verified_path(artifact, models_dir)
    if fitted.get("fitted_to") not in (None, model_sha):
        raise ModelArtifactError(
            f"{where}: window screen {artifact!r} was fitted to model {fitted['fitted_to'][:12]}, "
            f"not this one ({model_sha[:12]})"
        )
    screen = WindowScreen.from_file(path, cutoff)
    if screen.vocab != vocab:
        raise ModelArtifactError(
            f"{where}: window screen {artifact!r} reads {screen.vocab} ids, the tokenizer has {vocab}"
        )
    return screen

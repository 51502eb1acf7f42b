"""The window screen: its features, its artifact, and the shipped screen on what it must clear
and what it must never clear (the detector serving it: test_detector.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from deltaguard.artifacts import manifest_entry, verified_path
from deltaguard.classifiers.window_screen import (
    BUCKETS,
    CHUNK_STRIDE,
    CHUNK_TOKENS,
    FORMAT_VERSION,
    WindowScreen,
    chunk_bounds,
    feature_indices,
)
from deltaguard.errors import ModelArtifactError

VOCAB = 100


def test_features_are_the_ids_then_their_pairs_hashed():
    got = feature_indices(np.array([7, 8, 7, 8]), VOCAB)
    assert got[:4].tolist() == [7, 8, 7, 8]  # counts: repeats kept
    pairs = got[4:]
    assert len(pairs) == 3 and pairs[0] == pairs[2] != pairs[1]  # (7, 8) twice, (8, 7) once
    assert ((pairs >= VOCAB) & (pairs < VOCAB + BUCKETS)).all()
    assert feature_indices(np.array([5]), VOCAB).tolist() == [5]


def test_chunks_overlap_and_cover_every_id():
    assert chunk_bounds(0) == [(0, 0)] and chunk_bounds(CHUNK_TOKENS) == [(0, CHUNK_TOKENS)]
    for n in (CHUNK_TOKENS + 1, 100, 126):
        bounds = chunk_bounds(n)
        assert bounds[0][0] == 0 and bounds[-1][1] == n
        assert all(b - a == CHUNK_TOKENS for a, b in bounds)
        assert all(b2 > a1 and a2 <= a1 + CHUNK_STRIDE for (a1, _), (a2, b2) in itertools.pairwise(bounds))


def write(path, **arrays):
    data = {
        "weights": np.zeros(VOCAB + BUCKETS, np.float32),
        "bias": np.array(0.5),
        "vocab": np.array(VOCAB),
        "buckets": np.array(BUCKETS),
        "format_version": np.array(1),  # the detector's shipped screen: default chunks
    } | arrays
    np.savez(path, **data)
    return path


def test_the_margin_is_the_highest_chunks(tmp_path):
    weights = np.zeros(VOCAB + BUCKETS, np.float32)
    weights[7], weights[8] = 1.0, -0.25
    screen = WindowScreen.from_file(write(tmp_path / "s.npz", weights=weights), cutoff=2.0)
    ids = np.array([1, 7, 8, 7, 2])  # [CLS] ... [SEP]: one chunk
    assert screen.margin(ids) == 0.5 + 1.0 - 0.25 + 1.0
    assert not screen.clears(ids) and screen.clears(np.array([1, 8, 2]))
    # A window of many chunks: the 7s at its end make its margin, however long the rest.
    long = np.array([1, *[8] * 200, 7, 7, 2])
    assert screen.margin(long) == 0.5 + 2.0 - 0.25 * (CHUNK_TOKENS - 2)
    # The same as the chunk read alone, through the sparse sum training uses.
    last = long[1:-1][-CHUNK_TOKENS:]
    assert screen.margin(long) == pytest.approx(0.5 + weights[feature_indices(last, VOCAB)].sum())


@pytest.mark.parametrize(
    "arrays, match",
    [
        ({"format_version": np.array(FORMAT_VERSION + 1)}, "format"),
        ({"weights": np.zeros(VOCAB, np.float32)}, "weights"),
        ({"format_version": np.array(2)}, "chunk_tokens"),  # format 2 names its chunks
        (
            {"format_version": np.array(2), "chunk_tokens": np.array(8), "chunk_stride": np.array(9)},
            "chunks of 8 by 9",
        ),
    ],
)
def test_an_unreadable_artifact_is_refused(tmp_path, arrays, match):
    with pytest.raises(ModelArtifactError, match=match):
        WindowScreen.from_file(write(tmp_path / "s.npz", **arrays), cutoff=0.0)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelArtifactError, match="cannot read"):
        WindowScreen.from_file(tmp_path / "bad.npz", cutoff=0.0)


def test_a_saved_screen_reads_back_with_its_chunks(tmp_path):
    weights = np.zeros(VOCAB + BUCKETS, np.float32)
    weights[7] = 1.0
    whole = WindowScreen(weights, -0.5, VOCAB, BUCKETS, 0.0, chunk_tokens=94, chunk_stride=94)
    whole.save(tmp_path / "s.npz")
    again = WindowScreen.from_file(tmp_path / "s.npz", cutoff=1.0)
    assert (again.chunk_tokens, again.chunk_stride, again.bias) == (94, 94, -0.5)
    assert np.array_equal(again.weights, weights)
    # One chunk as long as the window: every 7 counts, where 32-id chunks keep only the most of them.
    ids = np.array([1, 7, *[8] * 40, 7, 2])
    assert again.margin(ids) == -0.5 + 2.0
    assert WindowScreen(weights, -0.5, VOCAB, BUCKETS, 0.0).margin(ids) == -0.5 + 1.0


def test_the_shipped_screen_is_the_manifests():
    spec = manifest_entry("detector")["window_screen"]
    path, entry = verified_path(spec["artifact"])
    screen = WindowScreen.from_file(path, spec["cutoff"])
    assert entry["version"] == "1" and screen.buckets == BUCKETS and screen.cutoff == spec["cutoff"]

"""The window screen: its features, its artifact, and the shipped screen on what it must clear
and what it must never clear (the detector serving it: test_detector.py)."""

from __future__ import annotations

import numpy as np
import pytest

from deltaguard.artifacts import manifest_entry, verified_path
from deltaguard.classifiers.window_screen import BUCKETS, FORMAT_VERSION, WindowScreen, feature_indices
from deltaguard.errors import ModelArtifactError

VOCAB = 100


def test_features_are_the_content_ids_then_their_pairs_hashed():
    ids = np.array([1, 7, 8, 7, 8, 2])  # [CLS] ... [SEP]
    got = feature_indices(ids, VOCAB)
    assert got[:4].tolist() == [7, 8, 7, 8]  # counts: repeats kept, the ends left out
    pairs = got[4:]
    assert len(pairs) == 3 and pairs[0] == pairs[2] != pairs[1]  # (7, 8) twice, (8, 7) once
    assert ((pairs >= VOCAB) & (pairs < VOCAB + BUCKETS)).all()
    assert feature_indices(np.array([1, 2]), VOCAB).size == 0


def write(path, **arrays):
    data = {
        "weights": np.zeros(VOCAB + BUCKETS, np.float32),
        "bias": np.array(0.5),
        "vocab": np.array(VOCAB),
        "buckets": np.array(BUCKETS),
        "format_version": np.array(FORMAT_VERSION),
    } | arrays
    np.savez(path, **data)
    return path


def test_the_margin_is_the_bias_plus_the_weights_of_its_features(tmp_path):
    weights = np.zeros(VOCAB + BUCKETS, np.float32)
    weights[7], weights[8] = 1.0, -0.25
    screen = WindowScreen.from_file(write(tmp_path / "s.npz", weights=weights), cutoff=1.0)
    ids = np.array([1, 7, 8, 7, 2])
    assert screen.margin(ids) == 0.5 + 1.0 - 0.25 + 1.0
    assert not screen.clears(ids) and screen.clears(np.array([1, 8, 2]))


@pytest.mark.parametrize(
    "arrays, match",
    [
        ({"format_version": np.array(FORMAT_VERSION + 1)}, "format"),
        ({"weights": np.zeros(VOCAB, np.float32)}, "weights"),
    ],
)
def test_an_unreadable_artifact_is_refused(tmp_path, arrays, match):
    with pytest.raises(ModelArtifactError, match=match):
        WindowScreen.from_file(write(tmp_path / "s.npz", **arrays), cutoff=0.0)
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ModelArtifactError, match="cannot read"):
        WindowScreen.from_file(tmp_path / "bad.npz", cutoff=0.0)


def test_the_shipped_screen_is_the_manifests():
    spec = manifest_entry("detector")["window_screen"]
    path, entry = verified_path(spec["artifact"])
    screen = WindowScreen.from_file(path, spec["cutoff"])
    assert entry["version"] == "1" and screen.buckets == BUCKETS
    evidence = spec["evidence"]
    # The rule's own figures: no flag lost on validation, most real windows cleared.
    assert evidence["validation"]["flags_lost"] == 0 and evidence["test"]["flags_lost"] == 0
    assert evidence["validation"]["traffic_windows_cleared"] > 0.8

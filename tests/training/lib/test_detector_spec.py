"""The detector recipe's bases: the default builds the shipped entry's files; another base
builds and folds under names of its own, so it never overwrites the shipped release's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from deltaguard.artifacts import manifest_entry
from training.lib.detector_folds import fold_dir
from training.lib.detector_spec import BASES, DEFAULT_BASE, MINER, REPO, rows_tag


def test_the_default_base_builds_the_shipped_detector():
    base, files = BASES[DEFAULT_BASE], manifest_entry("detector")["files"]
    assert manifest_entry("detector")["version"] == base.version
    assert (files["model"]["file"], files["heads"]["file"], files["tokenizer"]["file"]) == (
        base.model_file,
        base.heads_file,
        base.tokenizer_file,
    )


def test_another_base_has_its_own_files_and_folds():
    default, e5 = BASES[DEFAULT_BASE], BASES["e5"]
    assert {e5.model_file, e5.heads_file, e5.tokenizer_file}.isdisjoint(
        {default.model_file, default.heads_file, default.tokenizer_file}
    )
    assert fold_dir(("s-labs",), e5) != fold_dir(("s-labs",))
    assert fold_dir(("s-labs",), e5).name == "fold-s-labs-e5" and e5.vocab_frequent


def test_a_deeper_base_has_its_own_release_and_folds():
    e5 = BASES["e5"]
    deeper = e5.deeper(3)
    assert deeper.layers == 3 and e5.deeper(e5.layers) is e5
    assert (deeper.model_file, deeper.heads_file) == ("detector-e5-v1-3l.onnx", "detector-e5-v1-3l-heads.npz")
    assert deeper.version != e5.version and deeper.tokenizer_file == e5.tokenizer_file
    assert fold_dir(("s-labs",), deeper).name == "fold-s-labs-e5-3l"
    assert fold_dir(("s-labs",), BASES[DEFAULT_BASE].deeper(3)).name == "fold-s-labs-3l"


def test_a_fold_with_the_carriers_rows_has_a_folder_of_its_own():
    assert fold_dir(("agentdojo", "raginject"), carriers=True).name == "fold-agentdojo+raginject-carriers"
    assert fold_dir(("s-labs",), BASES["e5"].deeper(3), carriers=True).name == "fold-s-labs-e5-3l-carriers"


def test_a_base_keeps_no_more_layers_than_it_has():
    with pytest.raises(ValueError, match="has 6 layers"):
        BASES["minilm"].deeper(7)
    with pytest.raises(ValueError):
        BASES["e5"].deeper(0)


def test_a_tagged_base_builds_a_release_of_its_own_with_the_same_encoder():
    minilm = BASES[DEFAULT_BASE]
    tagged = minilm.tagged("-mined-v3")
    files = (tagged.model_file, tagged.heads_file)
    assert files == ("detector-v3-mined-v3.onnx", "detector-v3-mined-v3-heads.npz")
    assert tagged.version == "3-mined-v3" and (tagged.layers, tagged.suffix) == (minilm.layers, minilm.suffix)


def test_a_fine_tunings_threads_can_be_set_for_two_side_by_side():
    def threads(env: dict[str, str]) -> str:
        read = "from training.lib.detector_spec import TRAIN_THREADS; print(TRAIN_THREADS)"
        done = subprocess.run([sys.executable, "-c", read], env=env, cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    unset = {k: v for k, v in os.environ.items() if k != "DELTAGUARD_TRAIN_THREADS"}
    assert threads(unset) == "2"  # the build box's two cores
    assert threads({**unset, "DELTAGUARD_TRAIN_THREADS": "1"}) == "1"


def test_a_build_with_other_rows_is_tagged_by_them():
    assert rows_tag(False, (MINER,)) == ""  # the shipped recipe: its own release
    assert rows_tag(True, (MINER,)) == "-carriers"
    assert rows_tag(False, (MINER, "detector-v3")) == "-mined-v3"

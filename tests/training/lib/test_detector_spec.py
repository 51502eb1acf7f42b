"""The detector recipe's bases: the default builds the shipped entry's files; another base
builds and folds under names of its own, so it never overwrites the shipped release's."""

from __future__ import annotations

from deltaguard.artifacts import manifest_entry
from training.lib.detector_folds import fold_dir
from training.lib.detector_spec import BASES, DEFAULT_BASE


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

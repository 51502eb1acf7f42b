"""The coding-agent notes written by authors who never saw the classifiers (eval/coding_notes.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from eval.coding_notes import SETS, load


@pytest.mark.parametrize("title", sorted(SETS))
def test_each_set_pairs_injected_texts_with_as_many_benign_twins_of_each_kind(title):
    cases = load(SETS[title])
    assert len({c["id"] for c in cases}) == len(cases)
    kinds = Counter((c["carrier"], c["label"]) for c in cases)
    for carrier in {c["carrier"] for c in cases}:
        assert kinds[(carrier, "injected")] == kinds[(carrier, "benign")] >= 5
    for c in cases:
        assert 250 <= len(c["text"]) <= 2500, c["id"]
        assert bool(c["asks"]) == (c["label"] == "injected"), c["id"]


def test_the_sets_share_no_text():
    texts = [{c["text"] for c in load(path)} for path in SETS.values()]
    assert sum(map(len, texts)) == len(set().union(*texts))

"""The coding-agent notes written by authors who never saw the classifiers (eval/coding_notes.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from eval.coding_notes import SETS, load

# the first three sets were written as pairs within each kind of text; the later ones as
# pairs over the whole set, each text of a kind its author chose
PAIRED_BY_KIND = [title for title, path in SETS.items() if not path.stem.endswith(("_3", "_4"))]


@pytest.mark.parametrize("title", sorted(SETS))
def test_each_set_pairs_injected_texts_with_as_many_benign_twins(title):
    cases = load(SETS[title])
    assert len({c["id"] for c in cases}) == len(cases)
    labels = Counter(c["label"] for c in cases)
    assert labels["injected"] == labels["benign"] >= 60 and len(labels) == 2
    for c in cases:
        assert 250 <= len(c["text"]) <= 4000, c["id"]
        assert bool(c["asks"]) == (c["label"] == "injected"), c["id"]
        if c["label"] == "injected" and "span" in c:
            assert c["span"] and c["span"] in c["text"], c["id"]


@pytest.mark.parametrize("title", sorted(PAIRED_BY_KIND))
def test_the_first_sets_pair_them_within_each_kind_of_text(title):
    cases = load(SETS[title])
    kinds = Counter((c["carrier"], c["label"]) for c in cases)
    for carrier in {c["carrier"] for c in cases}:
        assert kinds[(carrier, "injected")] == kinds[(carrier, "benign")] >= 5
    assert all(250 <= len(c["text"]) <= 2500 for c in cases)


def test_the_sets_share_no_text():
    texts = [{c["text"] for c in load(path)} for path in SETS.values()]
    assert sum(map(len, texts)) == len(set().union(*texts))

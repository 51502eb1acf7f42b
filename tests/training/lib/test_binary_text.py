"""The detector's binary-text negatives (training/lib/binary_text.py)."""

from collections import defaultdict

from deltaguard.classifiers import normalize
from training.lib.binary_text import KINDS, binary_text_rows


def test_rows_are_seeded_benign_tool_outputs_split_by_group():
    rows = binary_text_rows(per_kind=20)
    assert rows == binary_text_rows(per_kind=20)  # the same rows every build
    assert {r["family"] for r in rows} == set(KINDS)
    assert all(r["label"] == "benign" and r["channel"] == "tool" and r["fp_set"] == "tool" for r in rows)
    splits = defaultdict(set)
    for r in rows:
        splits[r["group"]].add(r["split"])
    assert all(len(s) == 1 for s in splits.values())  # a group never straddles splits
    assert len({r["text"] for r in rows}) == len(rows)


def test_their_blobs_decode_to_nothing_readable():
    # What the corpus lacks: benign encodings whose decoding is not text, so the
    # normaliser gives no extra view and the blob stays in the one view the model reads.
    rows = binary_text_rows(per_kind=10)
    assert sum(normalize.views(r["text"]).extra is None for r in rows) >= 0.8 * len(rows)

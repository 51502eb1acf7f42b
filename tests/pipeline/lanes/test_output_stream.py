from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.lanes.output_stream import OutputStreamScorer

TEXT = (
    "Here is the config you asked for. The deploy key is AKIAIOSFODNN7EXAMPLE and the "
    "support mailbox is help.desk@example.org; the card on file ends the same way as "
    "4111 1111 1111 1111 did. " * 3
)


def findings_of(deltas, chunk_chars):
    scorer = OutputStreamScorer([SecretsClassifier(), PiiClassifier()], chunk_chars=chunk_chars)
    out = []
    for d in deltas:
        out += scorer.feed(d)
    out += scorer.flush()
    return sorted((f.category, f.kind) for f in out), scorer.scores


@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(1, len(TEXT) - 1), max_size=40, unique=True), chunk=st.integers(1, 400))
def test_findings_do_not_depend_on_how_the_stream_was_cut(cuts, chunk):
    bounds = [0, *sorted(cuts), len(TEXT)]
    deltas = [TEXT[a:b] for a, b in pairwise(bounds)]
    assert findings_of(deltas, chunk) == findings_of([TEXT], 10**6)


def test_each_value_found_once_even_split_mid_token():
    found, scores = findings_of(["the key is AKIAIOSF", "ODNN7EXAMPLE, bye"], chunk_chars=1)
    assert found == [("secrets", "aws_access_key_id")] and scores["secrets"] == 1.0

"""classifiers/decoding.py: the extra view's encoded text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from deltaguard.classifiers import decoding


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZq09+/=_-%\\?.:é漢 \n\x00"), max_size=2200))
def test_encoded_runs_are_the_patterns_runs(text):
    """The byte searches find the runs a regular expression of their definition finds."""
    pattern = re.compile(rf"[A-Za-z0-9/=_+%\\-]{{{decoding.MIN_SEGMENT_CHARS},}}")
    want = sorted({m.group(0) for m in pattern.finditer(text) if re.search(r"[0-9+%\\]", m.group(0))})
    assert decoding._long_runs(text) == want

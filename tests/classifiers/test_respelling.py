"""classifiers/respelling.py: the extra view's disguised spellings; its compiled byte-level
searches against the patterns they stand for."""

from __future__ import annotations

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from deltaguard.classifiers import respelling


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("a .*`-qx"), max_size=300))
def test_the_respelling_looks_are_the_byte_searches(shape):
    """One pass finds what a byte search or count each finds in a _RESPELL_SHAPE."""
    raw = shape.encode()
    want = (
        b"* *" in raw,
        b"a a a a a" in raw,
        b"a.a.a" in raw,
        b"a.a.a.a" in raw,
        raw.count(b"aqa"),
        raw.count(b"-"),
        raw.count(b"a-a"),
        raw.count(b"*") + raw.count(b"`"),
    )
    assert respelling._respell_looks(np.frombuffer(raw, dtype=np.uint8)) == want


def _clustered_by_differences(starts: np.ndarray, least: int, within: int) -> list[int]:
    """The starts that lie with least - 1 others in a row within `within`, by differences."""
    if len(starts) < least:
        return []
    first = np.flatnonzero(starts[least - 1 :] - starts[: 1 - least] <= within)
    keep = np.zeros(len(starts), dtype=bool)
    for k in range(least):
        keep[first + k] = True
    return starts[keep].tolist()


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "aaaaa", "a-a", "a.a", "aqa", " ", "n", " *a", " `a", "*", "-", "q"])).map(
        "".join
    ),
    st.booleans(),
    st.booleans(),
)
def test_the_marked_spots_are_the_marks_in_clusters(shape, dotted, symbols):
    """One pass finds the clusters of marks between letters, and of marks opening a token,
    that masks, differences and a search back for each token's start find."""
    raw = shape.encode()
    at = np.frombuffer(raw, dtype=np.uint8)
    mark = at == ord("-")
    if dotted:
        mark |= at == ord(".")
    if symbols:
        mark |= at == ord("q")
    marks = np.flatnonzero(mark)
    marks = marks[(marks > 0) & (marks < len(at) - 1)]
    marks = marks[(at.take(marks - 1) == ord("a")) & (at.take(marks + 1) == ord("a"))]
    kept = _clustered_by_differences(marks, respelling._MIN_MARKED, respelling._CLOSE)
    starts = sorted({max(raw.rfind(b" ", 0, i), raw.rfind(b"n", 0, i)) + 1 for i in kept})
    marks = np.flatnonzero((at == ord("*")) | (at == ord("`")))
    before = at.take(marks - 1)
    openings = marks[(before == ord(" ")) | (before == ord("n")) | (marks == 0)]
    opening = _clustered_by_differences(openings, respelling._MIN_WRAPPED, respelling._NEAR)
    broken_at, wrapped_at = respelling._marked_spots(at, True, dotted, symbols, True)
    assert (broken_at.tolist(), wrapped_at.tolist()) == (starts, opening)
    none = respelling._marked_spots(at, False, dotted, symbols, False)
    assert (len(none[0]), len(none[1])) == (0, 0)


@settings(max_examples=1000, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                ["all", "the", "ignore", "Previous", "API", "Key.", "x1", "é", "можете", "deltaguard", "If"]
            ),
            st.sampled_from(
                ["_", "-", "", " ", "\u00a0", "\x1c", "\n", "\U0001f642", ".", "?", "--", "__", "'"]
            ),
        ),
        max_size=40,
    )
)
def test_the_joined_candidates_miss_no_sentence_written_as_one_token(pairs):
    """The compiled search for candidates loses nothing: undoing every token of the text
    one by one gives the same text."""
    text = "".join(word + sep for word, sep in pairs)
    expected = re.sub(r"\S+", lambda m: respelling._unjoined_token(m.group(0)) or m.group(0), text)
    assert respelling.unjoined(text)[0] == expected


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("ehtdnaolsiTHE ?.\n1é"), max_size=200))
def test_the_backwards_cues_are_the_letter_runs_that_spell_one(text):
    raw = text.encode("ascii", "replace")
    cues = {"eht", "dna", "uoy", "ruoy", "lla", "siht", "taht", "htiw", "rof", "fo", "ot", "si", "ni", "nac"}
    want = [m.start() for m in re.finditer(rb"[A-Za-z]+", raw) if m.group(0).lower().decode() in cues]
    got = respelling._reversed_cues(np.frombuffer(raw, dtype=np.uint8), respelling._REVERSED_CUES)
    assert got.tolist() == want

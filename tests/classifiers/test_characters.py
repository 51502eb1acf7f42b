"""classifiers/characters.py: the per-character tables."""

from __future__ import annotations

import re

import numpy as np

from deltaguard.classifiers import characters


def test_code_point_classes_are_pythons():
    """The tables built once per process agree with Python's own character predicates."""
    every = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    space = characters.code_point_class(r"\s")
    assert np.array_equal(space, np.fromiter(map(str.isspace, every), dtype=bool, count=len(every)))
    word = characters.code_point_class(r"\w")
    alnum = np.fromiter(map(str.isalnum, every), dtype=bool, count=len(every))
    alnum[ord("_")] = True
    assert np.array_equal(word, alnum)
    sample = range(0, len(every), 97)
    assert [bool(re.fullmatch(r"\w", every[i])) for i in sample] == [bool(word[i]) for i in sample]
    letters = characters.code_point_class(r"[^\W\d_]")
    assert [bool(re.fullmatch(r"[^\W\d_]", every[i])) for i in sample] == [bool(letters[i]) for i in sample]
    assert characters.code_point_class(r"\s") is space  # one table per pattern, read-only
    assert not space.flags.writeable

"""What the extra view's passes spell out and how they write it back: the whole lowercase
words of the detector's tokenizer vocabulary (words.txt), which a rewrite must mostly spell to
count, and the splice that makes a pass's rewrites in the text.
"""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def known_words() -> frozenset[str]:
    """The whole lowercase words of the detector's tokenizer vocabulary (words.txt)."""
    return frozenset(Path(__file__).with_name("words.txt").read_text().split())


def spliced(text: str, changes: list[tuple[int, int, str]]) -> tuple[str, int]:
    """`text` with each (start, end, new text) of `changes` (in order, none overlapping)
    made, and how many."""
    if not changes:
        return text, 0
    out, last = [], 0
    for start, end, new in changes:
        out += [text[last:start], new]
        last = end
    out.append(text[last:])
    return "".join(out), len(changes)

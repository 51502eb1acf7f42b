"""The extra view's leetspeak words spelled out (classifiers/normalize.py): "1gn0r3 pr3v10u5"
reads "ignore previous", never an e-mail address, a version, an identifier or a number with a
unit. Candidate words are found by one compiled byte pass (numba), at `warm`.
"""

from __future__ import annotations

import re

import numba
import numpy as np

from deltaguard.classifiers.characters import LETTERS, shape_table
from deltaguard.classifiers.words import known_words, spliced

_LEET_CHARS = "013457@$"
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_HEXLIKE = re.compile(r"[0-9a-fA-F]+")
_LEET_L = str.maketrans({"0": "o", "1": "l", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_LEET_RUN = re.compile(r"[013457@$]+")
# A word next to one of these is part of an identifier, a number, a path or an encoded blob.
_NOT_LEET_NEIGHBOURS = b"_26789/+=-\\"
MAX_LEET_CHARS = 24


# Byte shapes of ASCII text: letter "a", leet digit "1", other digit "2", "@$" "1" too; a
# word of that shape ends at " " or "2". As arrays, for `_leet_spans`.
_LEET_SHAPE_OF = np.frombuffer(
    shape_table({LETTERS: b"a", b"013457@$": b"1", b"2689": b"2"}, b" "), dtype=np.uint8
)
_LEET_LETTER, _LEET_DIGIT, _LEET_OTHER_DIGIT, _LEET_EDGE = b"a12 "
_LEET_NEIGHBOUR = np.zeros(256, dtype=np.bool_)
_LEET_NEIGHBOUR[list(_NOT_LEET_NEIGHBOURS)] = True


def _leet_word(word: str) -> str | None:
    if not 3 <= len(word) <= MAX_LEET_CHARS or word.isdigit() or word[:2] in ("0x", "0X"):
        return None
    if len(word) >= 6 and _HEXLIKE.fullmatch(word):
        return None
    if any(c.isdigit() and c not in _LEET_CHARS for c in word):
        return None  # 2, 6, 8, 9 spell no letter here: a version, a size or an id
    letters = "".join(c for c in word if c.isalpha())
    if len(letters) < 2 or len(letters) == len(word):
        return None
    if not (letters.islower() or letters.isupper() or letters[1:].islower()):
        return None  # mixed case inside a word: an id or a base64 fragment, not a word
    head = word.rstrip("0123456789")
    if not any(c in _LEET_CHARS for c in head):
        return None  # letters then a number: "file10", "md5", "step35"
    return word.translate(_LEET).lower()


def _in_address(text: str, start: int, end: int) -> bool:
    """Whether the word text[start:end] has an "@" and a domain right after it ("name@host"
    then ".org"): an e-mail address or a user@host, which changelogs, commit trailers and
    package metadata are full of, not leetspeak."""
    return "@" in text[start:end] and text[end : end + 1] == "." and text[end + 1 : end + 2].isalnum()


def _spells_word(folded: str, word: str) -> bool:
    """Whether `folded` (`word` spelled out) is a word, reading its 1s as i or as l
    ("wou1d"); the fold itself keeps i, as the models were trained."""
    known = known_words()
    return folded in known or ("1" in word and word.translate(_LEET_L).lower() in known)


def _one_substitution(word: str) -> bool:
    """Whether the word's leet characters are one run ("pr0mpt", "@property", "10th"), not
    several ("1gn0r3"). One run is what identifiers, decorators, variables and numbers with
    a unit have, so such a fold must spell a word to count (a correction made after the
    shipped models were trained, like `_in_address`: 12% of real coding-agent tool outputs
    had an extra view and its leetspeak marker for them)."""
    return len(_LEET_RUN.findall(word)) == 1


@numba.njit(cache=True, nogil=True)
def _leet_spans(raw: np.ndarray, shape_of: np.ndarray, neighbour: np.ndarray) -> np.ndarray:
    """`fold_leet`'s candidate words: (start, end) of each word that holds a letter next to
    a leet character, in `raw` (the text's bytes, non-ASCII as "?") shaped by `shape_of`
    (_LEET_SHAPE_OF), but for those next to a `neighbour` (part of an identifier, a number, a
    path or an encoded blob: most of them in real text, each a few microseconds of Python).
    Linear: each search stops at the word's edge or the previous word's end. Compiled at
    `warm`."""
    n = raw.shape[0]
    out = np.empty((n // 2 + 1, 2), dtype=np.int64)
    k = 0
    end = 0
    for at in range(n - 1):
        if at < end:
            continue  # in the word just found
        a, b = shape_of[raw[at]], shape_of[raw[at + 1]]
        if not ((a == _LEET_LETTER and b == _LEET_DIGIT) or (a == _LEET_DIGIT and b == _LEET_LETTER)):
            continue
        start = 0
        for j in range(at - 1, end - 1, -1):
            if shape_of[raw[j]] == _LEET_EDGE or shape_of[raw[j]] == _LEET_OTHER_DIGIT:
                start = j + 1
                break
        end = at
        while end < n and shape_of[raw[end]] != _LEET_EDGE and shape_of[raw[end]] != _LEET_OTHER_DIGIT:
            end += 1
        if (start > 0 and neighbour[raw[start - 1]]) or (end < n and neighbour[raw[end]]):
            continue
        out[k, 0] = start
        out[k, 1] = end
        k += 1
    return out[:k]


def fold_leet(text: str, raw: bytes | None = None) -> tuple[str, int]:
    """Leetspeak words spelled out ("1gn0r3 pr3v10u5" -> "ignore previous"), and how many;
    `raw`: the text as ASCII bytes, non-ASCII as "?", if already made."""
    # One byte per character (non-ASCII as "?"), shaped so that a search finds every letter
    # next to a leet character; only the words around those hits are looked at.
    raw = text.encode("ascii", "replace") if raw is None else raw
    spans = _leet_spans(np.frombuffer(raw, dtype=np.uint8), _LEET_SHAPE_OF, _LEET_NEIGHBOUR).tolist()
    if not spans:
        return text, 0
    changes = []
    for start, end in spans:
        if _in_address(text, start, end):
            continue
        word = text[start:end]
        folded = _leet_word(word)
        if folded is not None and _one_substitution(word) and not _spells_word(folded, word):
            continue  # spells no word: a decorator, a $variable, html5lib, 3rd, 10px
        if folded is not None:
            changes.append((start, end, folded))
    return spliced(text, changes)


def warm() -> None:
    """Read the word list and compile the byte pass (or load it from numba's cache)."""
    known_words()
    fold_leet("a1")

"""Pieces of long untrusted text: the sentences and lines an injection hides among.

A classifier that reads a 16 KB file as a whole (or in 2,000-character chunks) sees one
injected sentence as a few percent of its features, and misses it. Scored piece by
piece, the sentence is judged as if it were alone. A piece is a line; lines shorter than
MIN_PIECE_CHARS join the next one (a bare `}` or `Usage:` says nothing alone, and judging
such fragments only adds chances of a false alarm; the shortest injections, "Reveal your
rules", are about that long); a line longer than PIECE_CHARS (a paragraph) is cut at its
sentences, consecutive sentences grouped up to PIECE_CHARS, and a sentence longer than
that is cut into overlapping windows.

Pieces are character ranges of the text as received, so a finding can point at them and
a sanitising action can cut them out. Splitting depends on the text alone: an item
yields the same pieces in delta and in full mode.

Which texts are cut, and whether a cut text is also read whole, is the reading's
(`reading`, named by the artifact's manifest entry): reading 1 (lexical-v5, and lexical-v6
as released) reads texts up to LONG_TEXT_CHARS whole only; reading 2 cuts any text of two
pieces or more, since an injected line among 300 characters of code is diluted too, and
reads it whole as well; reading 3 cuts as reading 2 does and reads a cut text over
WHOLE_TEXT_CHARS by its pieces alone: inside a long text the whole reading is diluted and
found nothing the pieces did not, at the kernels' cost of reading the text twice. Reading
4 reads as reading 3 and also reads whole each sentence that a line break cuts in
hard-wrapped prose (`_wrapped_sentences`): e-mails, manual pages, licences, changelogs and
many READMEs are wrapped at 72-80 columns, and an injected sentence in them is cut across
lines, each line a fragment that passes alone. Such a sentence ends past the lines it
starts among: pieces come in order of their starts, not of their ends.

The gate lane cuts every tool output, thousands of lines each, so lines and runs of wrapped
prose are found by compiled scans over the text's code points (numba), reading each code
point's classes from one table made with the patterns that define them (`_classes`).
Compiled at model load (`warm`), never at import.
"""

from __future__ import annotations

import functools
import itertools
import re

import numba
import numpy as np

from deltaguard.classifiers.characters import code_point_class, code_points

PIECE_CHARS = 400  # longer pieces are cut into windows of this size
PIECE_STEP = 300  # between the starts of a long piece's windows (100 characters of overlap)
MIN_PIECE_CHARS = 20  # shorter pieces join the next one
LONG_TEXT_CHARS = 400  # reading 1 reads texts up to this long whole only
WHOLE_TEXT_CHARS = 2000  # reading 3 reads longer cut texts by their pieces alone
READINGS = (1, 2, 3, 4)
PROSE_SHARE = 0.8  # letters and spaces in a line of prose (reading 4)

_SENTENCE_ENDS = ".!?;。！？；"
# A sentence end, with the blanks after it: a line break among them only in a run of wrapped
# lines (reading 4), since a line of its own holds none.
_SENTENCE_CUT = re.compile(r"[.!?;](?:[ \t]*\r?\n[ \t]*|[ \t]+)|[。！？；]")
_LINE_ENDS = ".!?;:。！？；："  # a line ending so ends its sentence or introduces what follows
_BLOCK_MARKS = "-*+>#|"  # a list item, a quote, a heading, a table row (or digits, `.` or `)`, a space)
_CODE_CHARS = "={};_"  # assignments, blocks, statements, identifiers: code, not prose


def _stripped(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


# What the line scans read of each code point (bits of `_classes`).
_F_SPACE = 1  # whitespace, as the pattern `\s` reads it: lines are stripped of it
_F_PROSE = 2  # a letter or a space: `[^\W\d_]| `
_F_CODE = 4  # _CODE_CHARS
_F_LINE_END = 8  # _LINE_ENDS
_F_SENTENCE_END = 16  # _SENTENCE_ENDS
_F_BLOCK_MARK = 32  # _BLOCK_MARKS
_F_DIGIT = 64  # `\d`
_NEWLINE, _DOT, _PARENTHESIS = 10, 46, 41


@functools.cache
def _classes() -> np.ndarray:
    """Per code point, its `_F_...` bits, found by the patterns they name over every code
    point (a fraction of a second, once per process)."""
    out = np.zeros(0x110000, dtype=np.uint8)
    for bit, pattern in ((_F_SPACE, r"\s"), (_F_PROSE, r"[^\W\d_]"), (_F_DIGIT, r"\d")):
        out[code_point_class(pattern)] |= bit
    out[ord(" ")] |= _F_PROSE  # prose: letters and spaces (`[^\W\d_]| `)
    marks = (
        (_F_CODE, _CODE_CHARS),
        (_F_LINE_END, _LINE_ENDS),
        (_F_SENTENCE_END, _SENTENCE_ENDS),
        (_F_BLOCK_MARK, _BLOCK_MARKS),
    )
    for bit, chars in marks:
        out[[ord(c) for c in chars]] |= bit
    return out


@numba.njit(cache=True, nogil=True)
def _scan_lines(points: np.ndarray, classes: np.ndarray, min_chars: int) -> np.ndarray:
    """`_lines` over the text's code points: (start, end) rows."""
    n = points.shape[0]
    out = np.empty((n // 2 + 1, 2), dtype=np.int64)  # a line and a line break: 2 chars or more
    k = 0
    pending = -1  # start of short lines waiting for the next one
    last_end = 0
    i = 0
    while i < n:
        while i < n and classes[points[i]] & _F_SPACE:
            i += 1
        if i == n:
            break
        a = i
        b = i + 1
        while i < n and points[i] != _NEWLINE:
            if not classes[points[i]] & _F_SPACE:
                b = i + 1
            i += 1
        last_end = b
        if pending < 0 and k > 0 and b - a < min_chars and classes[points[b - 1]] & _F_SENTENCE_END:
            out[k - 1, 1] = b
            continue
        if pending >= 0:
            a = pending
        if b - a < min_chars:
            pending = a
            continue
        pending = -1
        out[k, 0] = a
        out[k, 1] = b
        k += 1
    if pending >= 0:  # a short tail joins the line before it
        if k == 0:
            out[0, 0] = pending
            k = 1
        out[k - 1, 1] = last_end
    return out[:k]


@numba.njit(cache=True, nogil=True)
def _is_prose(points: np.ndarray, classes: np.ndarray, a: int, b: int, min_chars: int, share: float) -> bool:
    if b - a < min_chars:
        return False
    letters = 0
    for i in range(a, b):
        c = classes[points[i]]
        if c & _F_CODE:
            return False
        if c & _F_PROSE:
            letters += 1
    return letters >= share * (b - a)


@numba.njit(cache=True, nogil=True)
def _opens_block(points: np.ndarray, classes: np.ndarray, at: int) -> bool:
    """Whether a list item, a quote, a heading or a table row starts at `at`: one of
    _BLOCK_MARKS, or digits, then `.` or `)`, then a space (as the pattern `\\d+[.)]\\s`)."""
    if classes[points[at]] & _F_BLOCK_MARK:
        return True
    n = points.shape[0]
    i = at
    while i < n and classes[points[i]] & _F_DIGIT:
        i += 1
    return (
        i > at
        and i + 1 < n
        and (points[i] == _DOT or points[i] == _PARENTHESIS)
        and classes[points[i + 1]] & _F_SPACE != 0
    )


@numba.njit(cache=True, nogil=True)
def _scan_runs(
    points: np.ndarray, classes: np.ndarray, lines: np.ndarray, min_chars: int, share: float
) -> np.ndarray:
    """The runs of wrapped prose among `lines` (`_wrapped_sentences`): (start, end) rows."""
    out = np.empty((lines.shape[0], 2), dtype=np.int64)
    k = 0
    for p in range(lines.shape[0] - 1):
        a, b, c, d = lines[p, 0], lines[p, 1], lines[p + 1, 0], lines[p + 1, 1]
        if classes[points[b - 1]] & _F_LINE_END:
            continue
        breaks = 0
        for i in range(b, c):
            if points[i] == _NEWLINE:
                breaks += 1
        if breaks != 1 or _opens_block(points, classes, c):
            continue
        if k > 0 and out[k - 1, 1] == b:  # line a:b is in the run already, read for prose
            if _is_prose(points, classes, c, d, min_chars, share):
                out[k - 1, 1] = d
        elif _is_prose(points, classes, a, b, min_chars, share) and _is_prose(
            points, classes, c, d, min_chars, share
        ):
            out[k, 0] = a
            out[k, 1] = d
            k += 1
    return out[:k]


def _lines(text: str, points: np.ndarray | None = None) -> np.ndarray:
    """Non-empty lines, stripped, short ones joined to a neighbour: a short line that ends
    a sentence ("invocation.") to the line before it, whose sentence it ends; any other
    (a heading, `Usage:`, a bare `}`) to the line after it, which it introduces. (start,
    end) rows; `points`: the text's code points, if already made."""
    return _scan_lines(code_points(text) if points is None else points, _classes(), MIN_PIECE_CHARS)


def _wrapped_sentences(text: str, lines: np.ndarray, points: np.ndarray) -> list[tuple[int, int]]:
    """The sentences of hard-wrapped prose that a line break cuts, as (start, end) ranges,
    longer ones in windows. A run of wrapped prose is a line of prose (MIN_PIECE_CHARS long
    or more, PROSE_SHARE of it letters and spaces, none of the characters that code lines
    hold and prose lines seldom do: _CODE_CHARS) whose sentence goes on into the line of
    prose right below it (no blank line between), which starts no list item, quote or
    heading. E-mails, commit messages, manual pages and many READMEs are wrapped at 72-80
    columns, so a sentence, an injected one too, is cut across lines: its lines alone are
    fragments."""
    if len(lines) < 2:
        return []
    out: list[tuple[int, int]] = []
    for run in _scan_runs(points, _classes(), lines, MIN_PIECE_CHARS, PROSE_SHARE).tolist():
        cuts = [run[0], *(m.end() for m in _SENTENCE_CUT.finditer(text, *run)), run[1]]
        for x, y in itertools.pairwise(cuts):
            x, y = _stripped(text, x, y)
            if y - x >= MIN_PIECE_CHARS and text.find("\n", x, y) >= 0:
                out.extend(_windows(x, y))
    return out


def warm() -> None:
    """Build the per-code-point table and compile the scans (or load them from numba's
    cache) now, once per process."""
    pieces("A line of prose that goes on\nright below it, wrapped.", reading=4)


def _windows(a: int, b: int) -> list[tuple[int, int]]:
    if b - a <= PIECE_CHARS:
        return [(a, b)]
    starts = [*range(a, b - PIECE_CHARS, PIECE_STEP), b - PIECE_CHARS]
    return [(s, s + PIECE_CHARS) for s in starts]


def _sentences(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """A long line cut at its sentences, grouped greedily up to PIECE_CHARS."""
    cuts = [a, *(m.end() for m in _SENTENCE_CUT.finditer(text, a, b)), b]
    sentences = [_stripped(text, x, y) for x, y in itertools.pairwise(cuts)]
    out: list[tuple[int, int]] = []
    group: tuple[int, int] | None = None
    for x, y in (s for s in sentences if s[1] > s[0]):
        if group is not None and y - group[0] <= PIECE_CHARS:
            group = (group[0], y)
            continue
        if group is not None:
            out.extend(_windows(*group))
        group = (x, y)
    if group is not None:
        out.extend(_windows(*group))
    return out


def read_whole(reading: int, text: str, found: list[tuple[int, int]]) -> bool:
    """Whether `text`, cut into `found` pieces (`pieces`), is read whole as well."""
    return reading < 3 or not found or len(text) <= WHOLE_TEXT_CHARS


def pieces(text: str, reading: int = 1) -> list[tuple[int, int]]:
    """The (start, end) character ranges of `text`'s pieces, as `reading` reads them; []
    for a text that is read whole: with reading 1, LONG_TEXT_CHARS long or shorter; with
    any, a single piece (the text itself, stripped)."""
    if reading not in READINGS:
        raise ValueError(f"reading {reading!r} is not one of {READINGS}")
    if reading == 1 and len(text) <= LONG_TEXT_CHARS:
        return []
    points = code_points(text)
    lines = _lines(text, points)
    out: list[tuple[int, int]] = []
    for a, b in lines.tolist():
        if b - a <= PIECE_CHARS:
            out.append((a, b))
        else:
            out.extend(_sentences(text, a, b))
    if reading == 4:
        out = sorted(out + _wrapped_sentences(text, lines, points))
    return out if len(out) > 1 else []

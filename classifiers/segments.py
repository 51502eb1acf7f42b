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
"""

from __future__ import annotations

import itertools
import re
import string

PIECE_CHARS = 400  # longer pieces are cut into windows of this size
PIECE_STEP = 300  # between the starts of a long piece's windows (100 characters of overlap)
MIN_PIECE_CHARS = 20  # shorter pieces join the next one
LONG_TEXT_CHARS = 400  # reading 1 reads texts up to this long whole only
WHOLE_TEXT_CHARS = 2000  # reading 3 reads longer cut texts by their pieces alone
READINGS = (1, 2, 3, 4)
PROSE_SHARE = 0.8  # letters and spaces in a line of prose (reading 4)

_SENTENCE_ENDS = frozenset(".!?;。！？；")
# A sentence end, with the blanks after it: a line break among them only in a run of wrapped
# lines (reading 4), since a line of its own holds none.
_SENTENCE_END = re.compile(r"[.!?;](?:[ \t]*\r?\n[ \t]*|[ \t]+)|[。！？；]")
_LINE_ENDS = frozenset(".!?;:。！？；：")  # a line ending so ends its sentence or introduces what follows
_OPENS_BLOCK = re.compile(r"[-*+>#|]|\d+[.)]\s")  # a list item, a quote, a heading, a table row


def _stripped(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


_LINE = re.compile(r"\S(?:[^\n]*\S)?")  # a line's text without its surrounding whitespace


def _lines(text: str) -> list[tuple[int, int]]:
    """Non-empty lines, stripped, short ones joined to a neighbour: a short line that ends
    a sentence ("invocation.") to the line before it, whose sentence it ends; any other
    (a heading, `Usage:`, a bare `}`) to the line after it, which it introduces."""
    out: list[tuple[int, int]] = []
    pending: int | None = None  # start of short lines waiting for the next one
    for m in _LINE.finditer(text):
        a, b = m.span()
        if pending is None and out and b - a < MIN_PIECE_CHARS and text[b - 1] in _SENTENCE_ENDS:
            out[-1] = (out[-1][0], b)
            continue
        if pending is not None:
            a = pending
        if b - a < MIN_PIECE_CHARS:
            pending = a
            continue
        pending = None
        out.append((a, b))
    if pending is not None:  # a short tail joins the line before it
        tail_end = _stripped(text, pending, len(text))[1]
        out[-1:] = [(out[-1][0], tail_end)] if out else [(pending, tail_end)]
    return out


_LETTERS_AND_SPACES = (string.ascii_letters + " ").encode()
_NOT_PROSE = re.compile(r"[^\w ]|[\d_]")  # what is neither a letter nor a space, in any script
_CODE = re.compile(r"[={};_]")  # assignments, blocks, statements, identifiers: code, not prose


def _prose(line: str) -> bool:
    """Whether `line` reads as prose: MIN_PIECE_CHARS long or more, PROSE_SHARE of it
    letters and spaces, and none of the characters that code lines hold and prose lines
    seldom do (`_CODE`)."""
    if len(line) < MIN_PIECE_CHARS or _CODE.search(line):
        return False
    if line.isascii():  # the common case, counted in C: what is left once letters and spaces go
        other = len(line.encode().translate(None, _LETTERS_AND_SPACES))
    else:
        other = sum(1 for _ in _NOT_PROSE.finditer(line))
    return len(line) - other >= PROSE_SHARE * len(line)


def _wrapped_sentences(text: str, lines: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The sentences of hard-wrapped prose that a line break cuts, as (start, end) ranges,
    longer ones in windows. A run of wrapped prose is a line of prose (`_prose`) whose
    sentence goes on into the line of prose right below it (no blank line between), which
    starts no list item, quote or heading. E-mails, commit messages, manual pages and many
    READMEs are wrapped at 72-80 columns, so a sentence, an injected one too, is cut across
    lines: its lines alone are fragments. The cheap tests first: most lines end their
    sentence or are not followed by one right below, and are never read for prose."""
    runs: list[tuple[int, int]] = []
    for (a, b), (c, d) in itertools.pairwise(lines):
        if text[b - 1] in _LINE_ENDS or text.count("\n", b, c) != 1 or _OPENS_BLOCK.match(text, c):
            continue
        if runs and runs[-1][1] == b:  # line a:b is in the run already, read for prose
            if _prose(text[c:d]):
                runs[-1] = (runs[-1][0], d)
        elif _prose(text[a:b]) and _prose(text[c:d]):
            runs.append((a, d))
    out: list[tuple[int, int]] = []
    for run in runs:
        cuts = [run[0], *(m.end() for m in _SENTENCE_END.finditer(text, *run)), run[1]]
        for x, y in itertools.pairwise(cuts):
            x, y = _stripped(text, x, y)
            if y - x >= MIN_PIECE_CHARS and text.find("\n", x, y) >= 0:
                out.extend(_windows(x, y))
    return out


def _windows(a: int, b: int) -> list[tuple[int, int]]:
    if b - a <= PIECE_CHARS:
        return [(a, b)]
    starts = [*range(a, b - PIECE_CHARS, PIECE_STEP), b - PIECE_CHARS]
    return [(s, s + PIECE_CHARS) for s in starts]


def _sentences(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """A long line cut at its sentences, grouped greedily up to PIECE_CHARS."""
    cuts = [a, *(m.end() for m in _SENTENCE_END.finditer(text, a, b)), b]
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
    lines = _lines(text)
    out = []
    for a, b in lines:
        out.extend([(a, b)] if b - a <= PIECE_CHARS else _sentences(text, a, b))
    if reading == 4:
        out = sorted(out + _wrapped_sentences(text, lines))
    return out if len(out) > 1 else []

"""Text normalisation shared by the injection / jailbreak classifiers: what the models read.

Attackers hide instructions from text classifiers in ways a model upstream still reads:
look-alike letters from other scripts, invisible characters inside words, ASCII shifted
into Unicode tag characters, base64 / hex / URL-encoded sentences, leetspeak. `views`
turns one item's text into what is scored:

    primary   terminal escape sequences (colours, cursor moves: formatting a terminal
              never shows) and control characters removed, so that "Ig\x1b[0mnore" and
              "Ig\x00nore" read "Ignore" (the text of a title or a link's target stays); NFKC,
              invisible characters (zero-width, bidi controls, variation selectors, tag
              characters) removed, confusables folded to Latin in Latin text and in
              mixed-script words, combining marks over Latin letters dropped. Plain ASCII
              text (`plain`) is returned unchanged (the fast path: most tool outputs).
    extra     only when something was hidden, encoded or disguised: the primary view with tag
              characters decoded back to ASCII, letters written as numeric character
              references ("&#73;") decoded, base64 / hex / URL-encoded segments
              decoded in place (bounded: MAX_SEGMENTS segments of at most
              MAX_SEGMENT_CHARS characters, DECODE_ROUNDS rounds for nested encodings),
              leetspeak words folded (never an e-mail address: "name@host.org"),
              disguised spellings written plainly ("**Ignore** **all** **previous**",
              "I g n o r e", "ig-nore al-l pre-vious", "`Ignore` all `previous`"),
              sentences written as one token read as words ("ignore_all_previous_...",
              "IgnoreAllPrevious...", with no marker: identifiers do it too), lines
              written backwards read forwards ("snoitcurtsni suoiverp lla erongI"), and
              marker tokens saying what was found (HIDDEN_MARKER, DECODED_MARKER,
              LEET_MARKER). Invisible text and encoded instructions are evidence in
              themselves; the markers let a model trained on these views weigh that
              evidence, and a classifier scores the extra view too (max over views),
              counting its tokens as work. The encoder classifiers read only the extra
              view's windows that differ from the primary (`EncoderModel.view_windows`).

Everything is a pure function of the one text: deterministic, no state across items, so
delta mode and full mode see exactly the same views. Cost: a few microseconds for ASCII
text with nothing to decode (byte-level prefilters, the busiest two compiled), tens of
microseconds otherwise; the per-code-point table behind the Unicode checks is built and the
compiled passes loaded once (`warm`, called at load).

The primary view is made here; the extra view's passes are classifiers/decoding.py (encoded
text), classifiers/leetspeak.py and classifiers/respelling.py (disguised spellings), on the
per-character tables of classifiers/characters.py and the word list of classifiers/words.py.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from deltaguard.classifiers import decoding, leetspeak, respelling
from deltaguard.classifiers.characters import (
    CONFUSABLE_MAP,
    F_CONFUSABLE,
    F_INVISIBLE,
    F_LATIN,
    F_LETTER,
    F_MARK,
    code_points,
    tables,
    text_of,
)
from deltaguard.classifiers.leetspeak import fold_leet
from deltaguard.classifiers.respelling import rewritten_spots

__all__ = [
    "DECODED_MARKER",
    "HIDDEN_MARKER",
    "LEET_MARKER",
    "VERSION",
    "VERSIONS",
    "Views",
    "fold_leet",
    "plain",
    "primary",
    "rewritten_spots",
    "views",
    "warm",
]

# A model names the version of the views it was trained on and is served exactly those
# (`views(text, version)`); VERSION is what new models train on. 2: decoded text may span
# lines (1 left encoded text with line breaks encoded). Both leave e-mail addresses unfolded
# (`leetspeak._in_address`, a correction made after the shipped models were trained: folding them gave
# 30% of the benign tool outputs and documents an extra view, and its leetspeak marker), and
# fold a word with one run of leet characters only when it spells a word (`leetspeak._spells_word`,
# the same kind of correction, for decorators, $variables and library names).
VERSION = "2"
VERSIONS = ("1", "2")
HIDDEN_MARKER = "dg_hidden_text"
DECODED_MARKER = "dg_decoded_text"
LEET_MARKER = "dg_leet_text"

_TAGS = re.compile("[\U000e0020-\U000e007e]+")
_ZW_IN_WORD = re.compile("(?<=[A-Za-z])[\u200b-\u200d\u2060\ufeff\u00ad]+(?=[A-Za-z])")
_VARIATION_RUN = re.compile("[\U000e0100-\U000e01ef]{4,}")
_MIN_TAG_PAYLOAD = 8  # emoji subdivision flags use 4-6 tag characters legitimately
_MIN_ZW_IN_WORDS = 2  # one stray zero-width space is copy-paste noise

# ECMA-48 escape sequences. A control sequence (ESC [ or the C1 byte, parameters,
# intermediates, a final byte: colours, cursor moves) holds no text and is removed, as is
# any other escape (ESC 7, ESC ( B, a lone ESC). A string's opening and closing escapes
# (OSC ESC ], DCS ESC P, PM, APC, SOS, ST ESC \) become spaces and its text stays: a title
# or a link's target is text the model reads, so the classifiers read it too.
_ESCAPE = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b[ -/]*([0-~])?")
_STRING_ESCAPES = frozenset("]P^_X\\")
# Control characters that are not whitespace (C0 but tab, line feed, vertical tab, form
# feed and carriage return; DEL; C1 but NEL): no renderer shows them.
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_CONTROL_BYTES = bytes([*range(0x09), *range(0x0E, 0x20), 0x7F])


def _unescaped(text: str) -> str:
    return _ESCAPE.sub(lambda m: " " if m.group(1) and m.group(1) in _STRING_ESCAPES else "", text)


_CONFUSABLES = str.maketrans(CONFUSABLE_MAP)
_MIXED_WORD = re.compile(r"\w*[A-Za-z]\w*")


@dataclass(frozen=True, slots=True)
class Views:
    """What is scored for one text: `primary`, and `extra` when something was hidden."""

    primary: str
    extra: str | None
    hidden: int  # invisible characters that hid text (tag payloads, zero-width in words)
    decoded: int  # encoded segments decoded
    leet: int  # words spelled out: folded from leetspeak, or a disguised spelling or backwards line undone
    # Whether the text was `plain` (its own primary view): a fact about the text read, not
    # about what is scored, so two Views that score the same are equal either way.
    plain: bool = field(default=False, compare=False)
    joined: int = 0  # sentences written as one token undone (no marker: identifiers do it too)
    backwards: int = 0  # of `leet`, lines written backwards read forwards

    def texts(self) -> list[str]:
        """The views to score, primary first."""
        return [self.primary] if self.extra is None else [self.primary, self.extra]

    @property
    def within_lines(self) -> bool:
        """Whether the extra view differs from the primary only by sentences written as one
        token and lines written backwards: changes inside a line, which the pieces of the
        text that hold one find on their own (`rewritten_spots`)."""
        return self.extra is not None and not (self.hidden or self.decoded) and self.leet == self.backwards


_PLAIN_FLAGS = F_INVISIBLE | F_CONFUSABLE | F_MARK  # none of these: each character is read alone


@functools.cache
def _unaccented() -> np.ndarray:
    """Per code point up to the last one it changes, what dropping the marks over Latin
    letters does to it in NFKC text that holds none of _PLAIN_FLAGS: a precomposed Latin
    letter ("é", "ą", "Å", 488 of them) becomes its base letter, every other character
    stays. Such text has no combining mark of its own, so no mark sits on a neighbour and
    the result is the text mapped character by character (`_marks_dropped` of the
    decomposed text, recomposed, is the same: a test checks every character in context)."""
    flags = tables()[0]
    table = np.arange(0x1F00, dtype="<u4")  # past the last precomposed Latin letter (a test checks)
    for code in range(len(table)):
        char = chr(code)
        decomposition = unicodedata.decomposition(char)
        if not decomposition or decomposition.startswith("<") or flags[code] & _PLAIN_FLAGS:
            continue  # no canonical decomposition: nothing to drop
        if unicodedata.normalize("NFKC", char) != char:
            continue  # never in NFKC text
        points = code_points(unicodedata.normalize("NFD", char))
        dropped = _marks_dropped(points, flags.take(points))
        if dropped != char:
            (table[code],) = code_points(dropped)  # one letter, or this fails at load
    table.flags.writeable = False
    return table


def _unaccent(points: np.ndarray) -> np.ndarray:
    """`points` (NFKC text holding none of _PLAIN_FLAGS) with their marks over Latin
    letters dropped (`_unaccented`): the same length."""
    table = _unaccented()
    inside = points < len(table)
    return np.where(inside, table.take(np.minimum(points, len(table) - 1)), points)


def warm() -> None:
    """Build the per-code-point tables, read the word list and compile the byte passes (or
    load them from numba's cache) now: about a second, once per process."""
    tables()
    _unaccented()
    leetspeak.warm()
    respelling.warm()


def _is_latin(flags: np.ndarray) -> bool:
    return 2 * int(np.count_nonzero(flags & F_LATIN)) >= int(np.count_nonzero(flags & F_LETTER))


def _marks_dropped(points: np.ndarray, flags: np.ndarray) -> str:
    """Decomposed text (its code points and their flags) with the combining marks stacked
    on Latin letters ("ïgnörë", zalgo text) dropped, recomposed."""
    mark = (flags & F_MARK) != 0
    position = np.arange(len(points))
    base = np.maximum.accumulate(np.where(mark, 0, position))  # the character each mark sits on
    on_latin = mark & ((flags.take(base) & F_LATIN) != 0)
    return unicodedata.normalize("NFC", text_of(points[~on_latin]))


def plain(text: str) -> bool:
    """Whether `text` is its own primary view at no cost: ASCII without control characters
    (line breaks and tabs aside). One byte-level pass, a fraction of a ns per character."""
    return text.isascii() and len(text.encode("ascii").translate(None, _CONTROL_BYTES)) == len(text)


def _visible(text: str) -> str:
    """`text` without escape sequences and control characters (line breaks and tabs
    aside): they split words where a terminal or a page shows none, and the model upstream
    reads the word whole. A correction made after the shipped models were trained (in the
    detection corpus, two training rows and no validation row hold such a character)."""
    return _CONTROLS.sub("", _unescaped(text)) if _CONTROLS.search(text) else text


def _folded_word(m: re.Match[str]) -> str:
    return m.group(0).translate(_CONFUSABLES)


def primary(text: str) -> str:
    """The primary view (see the module docstring); `plain` text is returned as is."""
    return text if plain(text) else primary_many((text,))[0]


def primary_many(texts: Sequence[str]) -> list[str]:
    """The primary view of each text. The per-code-point checks of all the non-ASCII texts
    are made in one pass: the lines of a non-ASCII tool output, which one call each would
    spend most of their time setting up."""
    out = list(texts)
    todo: list[tuple[int, str]] = []  # (index, NFKC of the visible text)
    for i, text in enumerate(texts):
        if plain(text):
            continue
        text = _visible(text)
        # Most text is NFKC already: the check costs a fifth of the normalisation.
        normal = (
            text
            if text.isascii() or unicodedata.is_normalized("NFKC", text)
            else unicodedata.normalize("NFKC", text)
        )
        if normal.isascii():  # nothing to fold, hide or mark: its own view
            out[i] = normal
        else:
            todo.append((i, normal))
    if not todo:
        return out
    flags_of, fold = tables()
    normals = [normal for _, normal in todo]
    points = code_points("".join(normals))
    flags = flags_of.take(points)
    bounds = np.cumsum([0, *map(len, normals)])  # every segment holds a non-ASCII character
    seen = np.bitwise_or.reduceat(flags, bounds[:-1]).tolist()
    latin = np.add.reduceat((flags & F_LATIN) != 0, bounds[:-1], dtype=np.int64)
    letters = np.add.reduceat((flags & F_LETTER) != 0, bounds[:-1], dtype=np.int64)
    marked = []
    unaccented = None  # every text's points unaccented (`_unaccent`), made once if needed
    for k, ((i, text), found, on_latin) in enumerate(
        zip(todo, seen, (2 * latin >= letters).tolist(), strict=True)
    ):
        if not found & _PLAIN_FLAGS:  # the common case: character by character, one pass for all
            if on_latin:
                unaccented = text_of(_unaccent(points)) if unaccented is None else unaccented
                text = unaccented[bounds[k] : bounds[k + 1]]
            out[i] = text
            continue
        if found & (F_INVISIBLE | F_CONFUSABLE):
            a, b = bounds[k], bounds[k + 1]
            text, on_latin = _revealed(points[a:b], flags[a:b], found, fold)
        if found & F_CONFUSABLE and not on_latin:  # other scripts: only words that mix in Latin letters
            text = _MIXED_WORD.sub(_folded_word, text)
        out[i] = text
        # A combining mark of its own, or one a character decomposes into (not dashes, quotes
        # or other scripts' letters): decomposed below.
        if on_latin and not text.isascii() and (found & F_MARK or not unicodedata.is_normalized("NFD", text)):
            marked.append(i)
    if marked:
        decomposed = [unicodedata.normalize("NFD", out[i]) for i in marked]
        points = code_points("".join(decomposed))
        flags = flags_of.take(points)
        bounds = np.cumsum([0, *map(len, decomposed)])
        marks = np.bitwise_or.reduceat(flags, bounds[:-1]) & F_MARK
        for k, (i, mark) in enumerate(zip(marked, marks.tolist(), strict=True)):
            if mark:
                out[i] = _marks_dropped(points[bounds[k] : bounds[k + 1]], flags[bounds[k] : bounds[k + 1]])
    return out


def _revealed(points: np.ndarray, flags: np.ndarray, seen: int, fold: np.ndarray) -> tuple[str, bool]:
    """A text (its code points, their flags, the OR of those) without its invisible
    characters and, when it is Latin text, with every look-alike folded; and whether it is."""
    if seen & F_INVISIBLE:
        keep = (flags & F_INVISIBLE) == 0
        points, flags = points[keep], flags[keep]
    latin = _is_latin(flags)
    if seen & F_CONFUSABLE and latin:  # Latin text: every look-alike is a disguise
        points = fold.take(points)
    return text_of(points), latin


def _hidden(text: str) -> tuple[str, int]:
    """Tag-character payloads decoded to ASCII, and a count of smuggling-grade hiding."""
    zero_width = len(_ZW_IN_WORD.findall(text))
    evidence = zero_width if zero_width >= _MIN_ZW_IN_WORDS else 0
    payloads = [m for m in _TAGS.finditer(text) if len(m.group(0)) >= _MIN_TAG_PAYLOAD]
    if payloads:
        evidence += sum(len(m.group(0)) for m in payloads)
        text = _TAGS.sub(lambda m: " " + "".join(chr(ord(c) - 0xE0000) for c in m.group(0)) + " ", text)
    evidence += sum(len(m.group(0)) for m in _VARIATION_RUN.finditer(text))
    return text, evidence


def views(text: str, version: str = VERSION) -> Views:
    """The primary view of `text` and, when something was hidden, encoded or disguised, the
    extra view, as normaliser `version` (one of VERSIONS) made them."""
    if version not in VERSIONS:
        raise ValueError(f"normalize version {version!r} is not one of {VERSIONS}")
    lines = version != "1"
    is_plain = plain(text)
    first = text if is_plain else primary_many((text,))[0]
    hidden = 0
    extra = first
    if not text.isascii() and np.bitwise_or.reduce(tables()[0].take(code_points(text))) & F_INVISIBLE:
        revealed, hidden = _hidden(text)
        if hidden:
            extra = primary(revealed)
    extra, decoded = decoding.char_refs(extra)
    if decoded:
        extra = primary(extra)
    budget = [decoding.MAX_SEGMENTS]
    raw = extra.encode("ascii", "replace")  # one byte per character, for the byte-level looks
    for _ in range(decoding.DECODE_ROUNDS):
        extra, n = decoding.decode_segments(extra, budget, lines, raw)
        decoded += n
        if not n:
            break
        extra = primary(extra)
        raw = extra.encode("ascii", "replace")
    extra, respelled = respelling.respelled(extra, raw)
    extra, leet = leetspeak.fold_leet(extra, None if respelled else raw)
    extra, joined = respelling.unjoined(extra, None if respelled or leet else raw)
    extra, backwards = respelling.unreversed(extra, None if respelled or leet or joined else raw)
    leet += respelled + backwards
    if not (hidden or decoded or leet or joined):
        return Views(first, None, 0, 0, 0, is_plain)
    markers = [m for m, n in ((HIDDEN_MARKER, hidden), (DECODED_MARKER, decoded), (LEET_MARKER, leet)) if n]
    return Views(first, " ".join([*markers, extra]), hidden, decoded, leet, is_plain, joined, backwards)

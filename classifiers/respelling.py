"""The extra view's disguised spellings written plainly (classifiers/normalize.py): words
spaced, dotted, broken by marks or wrapped one by one in emphasis written whole, sentences
written as one token read as words, and lines written backwards read forwards (leetspeak is
classifiers/leetspeak.py). The byte-level searches are compiled (numba), at `warm`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numba
import numpy as np

from deltaguard.classifiers.characters import F_LETTER, LETTERS, code_points, shape_table, tables
from deltaguard.classifiers.words import known_words, spliced

# Disguised spellings (`_respelled`): a run of words each wrapped in the same emphasis
# mark (not "__", which wraps C and Python names), and a word of single letters joined by
# one space or one dot.
_WRAPPED_RUN = re.compile(r"(?<![\w*~])(\*{1,3}|_|~~)[^\W\d_]+\1(?:[ \t]+\1[^\W\d_]+\1)+(?![\w*~])")
_RESPELL_SHAPE = shape_table(
    {
        LETTERS: b"a",
        b" \t": b" ",
        b"\n\r": b"n",
        b".": b".",
        b"*_~": b"*",
        b"`": b"`",
        b"-|^+": b"-",
        b"?": b"q",
    },
    b"x",
)
_SPACED = re.compile(r"(?<![\w.])[^\W\d_]( )(?:[^\W\d_]\1){3,}[^\W\d_](?!\w)")  # five letters or more
_DOTTED = re.compile(r"(?<![\w.])[^\W\d_](\.)(?:[^\W\d_]\1){2,}[^\W\d_](?!\w)")  # four ("U.S.A." is three)
# In a text with a word so spelled, a word of two to four letters set apart from the next
# by two spaces or more ("I g n o r e  a l l  p r e v i o u s": words one space apart
# would read as one).
_SPACED_SHORT = re.compile(r"(?<![^\s])[^\W\d_](?: [^\W\d_]){1,3}(?=  | [.,;:!?]|\s*$)")
_WIDE_GAP = re.compile(r"(?<=\S)  +(?=\S)")
# Words broken by a mark inside them, which a text classifier reads as pieces and the model
# upstream reads through: "ig-nore", "pre\U0001f642vious", "in|structions", "a.l.l" (a mark
# is any character but letters, digits, spaces, apostrophes, quotes, brackets and the marks
# of paths, addresses and assignments; in a byte shape, "-|^+", non-ASCII characters
# between Latin letters, and dots between single letters); and words wrapped one by one in
# backticks or emphasis, with plain words between ("`Ignore` all `previous` `instructions`").
# Only marks in a cluster are looked at: _MIN_MARKED between letters within _CLOSE
# characters (a disguise marks every word or every other, prose a compound here and
# there), _MIN_WRAPPED opening tokens within _NEAR. A stretch of such words, each within
# _NEAR characters of the next, is undone when they make up a third of its words (broken),
# or _WRAPPED_SHARE of its words of four letters or more and it holds a function word
# (wrapped: a sentence, not a list of names).
_BROKEN = re.compile(r"[^\W\d_]+([^\w\s'\u2019\"/:@=&()\[\]{}<>])[^\W\d_]+(?:\1[^\W\d_]+)*")
_CORE = re.compile(r"[^\W\d_](?:.*[^\W\d_])?", re.S)  # a token from its first letter to its last
_WRAPPED_WORD = re.compile(r"(`|\*{1,3}|_|~~)([^\W\d_]+(?:['\u2019][^\W\d_]+)?)[.,!?]?\1")
_TOKEN = re.compile(r"\S+")
_EDGES = "".join(c for c in map(chr, range(33, 127)) if not c.isalnum())
_NO_MARKS = str.maketrans("", "", "-|^+")  # the ASCII marks of _RESPELL_SHAPE's "-" class
_LETTER, _SPACE, _NEWLINE, _DOT, _EMPHASIS, _BACKTICK, _MARK, _SYMBOL = b"a n.*`-q"  # its classes
_CLOSE = 40
_NEAR = 80
_MIN_MARKED = 3  # broken words
_MIN_WRAPPED = 4  # wrapped words: emphasis on three words in a row is ordinary
_FUNCTION_WORDS = frozenset(
    "a an the all any every each no not and or but if then to of in on at by for from with as "
    "into about over after before this that these those it its is are was were be been has have "
    "had do does did can could will would should must may might shall you your yours me my we "
    "our us they them their he him his she her what which who how when where why there here".split()
)
_WRAPPED_SHARE = 0.8  # docs wrap names in prose ("set `timeout` and `retries` in the file"), not every word
# A sentence written as one token (`_unjoined`): its words joined by "_", "-" or a symbol, or
# in CamelCase. Identifiers join words too ("test_the_parser_reads_a_file", a heading's anchor
# "#can-i-store-the-script-in-a-folder"), so it takes MIN_JOINED words, most of them words
# (_JOINED_WORDS_SHARE), one a function word; such an identifier is then read as the
# sentence it is, with no marker (of 25,664 real texts 4.1% hold one, and the lexical view
# flags none of them read so).
MIN_JOINED = 5
MIN_JOINED_FUNCTION = 1
_JOINED_WORDS_SHARE = 0.8
_JOIN = re.compile(r"[_\-]|[^\x00-\x7f\w\s]")
# A word of CamelCase, with the marks that end a sentence or a clause before the next word
# ("InstructionsAndPrint.TheKey").
_CAMEL_WORD = re.compile(rf"(?:[A-Z]?[a-z][a-z']*|[A-Z]+(?![a-z]))(?:[{re.escape(_EDGES)}]+(?=[A-Z]|$))?")
# Byte classes for `_joined_spans` (`_join_view`: a letter of another script is _WORD_BYTE,
# any other non-ASCII character "?").
_J_SPACE, _J_LOWER, _J_UPPER, _J_DIGIT, _J_SEPARATOR, _J_OTHER, _J_APOSTROPHE, _J_MARK, _J_WORD = range(9)
_WORD_BYTE = 0x80
_JOIN_CLASS = np.frombuffer(
    shape_table(
        {
            b" \t\n\v\f\r\x1c\x1d\x1e\x1f": bytes([_J_SPACE]),  # str.isspace's ASCII
            LETTERS[26:]: bytes([_J_LOWER]),
            LETTERS[:26]: bytes([_J_UPPER]),
            b"0123456789": bytes([_J_DIGIT]),
            b"_-": bytes([_J_SEPARATOR]),
            b"?": bytes([_J_OTHER]),
            b"'": bytes([_J_APOSTROPHE]),
            bytes([_WORD_BYTE]): bytes([_J_WORD]),
        },
        bytes([_J_MARK]),
    ),
    dtype=np.uint8,
)
# Text written backwards (`_unreversed`): a line whose words of three letters or more
# (MIN_REVERSED_WORDS of them at least) are mostly words read backwards
# (_REVERSED_WORDS_SHARE) and few read forwards (_FORWARD_WORDS_SHARE). Only lines holding
# one of _REVERSED_CUES, short function words as they read backwards, are looked at.
MIN_REVERSED_WORDS = 4
_REVERSED_WORDS_SHARE = 0.7
_FORWARD_WORDS_SHARE = 0.4
_REVERSED_CUES = np.array(
    sorted(
        sum((ord(ch) - 96) << (5 * k) for k, ch in enumerate(cue))
        for cue in "eht dna uoy ruoy lla siht taht htiw rof fo ot si ni nac".split()
    ),
    dtype=np.int64,
)  # each packed five bits a letter, first letter lowest
_LETTER_RUN = re.compile(r"[A-Za-z]{3,}")


@numba.njit(cache=True, nogil=True)
def _respell_looks(shape: np.ndarray) -> tuple[bool, bool, bool, bool, int, int, int, int]:
    """What `_respelled` and `_unmarked` look for in a _RESPELL_SHAPE, in one pass (a byte
    search or count each took one pass over text that is mostly "a", where they skip
    little): whether it holds "* *", "a a a a a", "a.a.a" and "a.a.a.a"; how many "aqa",
    "-" and "a-a" it holds, counted as bytes.count counts (no two overlap); and how many
    "*" and "`". Compiled at `warm`."""
    star_gap_star = spaced = dots3 = dots4 = False
    aqa = dashes = ada = emphasis = 0
    aqa_from = ada_from = 0  # where the next counted "aqa" / "a-a" may start
    for i in range(shape.shape[0]):
        c = shape[i]
        if c == _LETTER:
            if i < 2 or shape[i - 2] != _LETTER:
                continue
            m = shape[i - 1]
            if m == _SYMBOL:
                if i - 2 >= aqa_from:
                    aqa += 1
                    aqa_from = i + 1
            elif m == _MARK:
                if i - 2 >= ada_from:
                    ada += 1
                    ada_from = i + 1
            elif m == _DOT:
                if i >= 4 and shape[i - 3] == _DOT and shape[i - 4] == _LETTER:
                    dots3 = True
                    if i >= 6 and shape[i - 5] == _DOT and shape[i - 6] == _LETTER:
                        dots4 = True
            elif m == _SPACE and i >= 8 and not spaced:
                spaced = True
                for k in range(3, 9):
                    if shape[i - k] != (_SPACE if k % 2 else _LETTER):
                        spaced = False
                        break
        elif c == _MARK:
            dashes += 1
        elif c == _EMPHASIS:
            emphasis += 1
            if i >= 2 and shape[i - 1] == _SPACE and shape[i - 2] == _EMPHASIS:
                star_gap_star = True
        elif c == _BACKTICK:
            emphasis += 1
    return star_gap_star, spaced, dots3, dots4, aqa, dashes, ada, emphasis


def respelled(text: str, raw: bytes) -> tuple[str, int]:
    """Disguised spellings written plainly, and how many: words wrapped one by one in
    emphasis marks, two or more in a row ("**Ignore** **all** **previous**"; not inline
    code, which is how docs list names: "`json` `yaml` `toml`"), words
    spelled letter by letter ("I g n o r e", five letters or more; "r.u.l.e", four), and
    stretches of words broken by a mark or wrapped in backticks or emphasis one by one
    (`_unmarked`). All cut a text classifier's n-grams and leave the
    model upstream reading the words; no formatting looks like this (of 3,919 real agent
    tool outputs, none has a wrapped run and one a spelled word; of 14,166 real texts of
    the validation and test conversations and 53,236 benign corpus rows, none has a
    stretch of broken or wrapped words)."""
    # A byte-level look first: the patterns start with lookbehinds, which the regular
    # expression engine tries at every character (on 300 real tool outputs, 37 ms without
    # this look and 5 with it).
    shape = raw.translate(_RESPELL_SHAPE)
    wrapped, spaced, letters_dotted, dotted, *counts = _respell_looks(np.frombuffer(shape, dtype=np.uint8))
    text, found = _unmarked(text, shape, letters_dotted, counts)
    if not (wrapped or spaced or dotted):
        return text, found

    def plainly(m: re.Match[str]) -> str:
        nonlocal found
        found += 1
        return m.group(0).replace(m.group(1), "")

    if wrapped:
        text = _WRAPPED_RUN.sub(plainly, text)
    if spaced:
        before = found
        text = _SPACED.sub(plainly, text)
        if found > before:  # and the short words between, set apart by wider gaps
            text = _WIDE_GAP.sub(" ", _SPACED_SHORT.sub(lambda m: m.group(0).replace(" ", ""), text))
    if dotted:
        text = _DOTTED.sub(plainly, text)
    return text, found


def _unmarked(text: str, shape: bytes, dotted: bool, counts: Sequence[int]) -> tuple[str, int]:
    """Broken words and wrapped words written plainly, in the stretches where they are a
    disguise (see _BROKEN), and how many stretches. `shape` is the text's _RESPELL_SHAPE,
    `dotted` whether it has letters with dots between ("a.a.a") and `counts` its counts
    of marks (`_respell_looks`). Only tokens the shape shows in a cluster are looked at:
    _MIN_MARKED marks between two letters within _CLOSE characters, or _MIN_WRAPPED
    backticks or emphasis marks opening a token within _NEAR. The counts first: most texts
    have too few marks for either."""
    between_symbols, marks_in_all, between_marks, emphasis = counts
    # Non-ASCII characters are "?" in the shape: an emoji inside a word, or any other
    # script's letter; looked at only between Latin letters.
    symbols = not text.isascii() and between_symbols >= _MIN_MARKED
    broken = dotted or symbols or (marks_in_all >= _MIN_MARKED and between_marks >= _MIN_MARKED)
    wrapped = emphasis >= 2 * _MIN_WRAPPED
    if not (broken or wrapped):
        return text, 0
    broken_at, wrapped_at = _marked_spots(
        np.frombuffer(shape, dtype=np.uint8), broken, dotted, symbols, wrapped
    )
    found = 0
    if len(broken_at):
        text, n = _rewritten(text, broken_at.tolist(), _unbroken, _broken_enough, _MIN_MARKED)
        found += n
    if len(wrapped_at):
        text, n = _rewritten(text, wrapped_at.tolist(), _unwrapped, _wrapped_enough, _MIN_WRAPPED)
        found += n
    return text, found


@numba.njit(cache=True, nogil=True)
def _clustered(starts: np.ndarray, n: int, least: int, within: int) -> np.ndarray:
    """The first `n` `starts` (in order) that lie with `least` - 1 others in a row within
    `within` characters."""
    keep = np.zeros(n, dtype=np.bool_)
    for i in range(n - least + 1):
        if starts[i + least - 1] - starts[i] <= within:
            keep[i : i + least] = True
    return starts[:n][keep]


@numba.njit(cache=True, nogil=True)
def _marked_spots(
    at: np.ndarray, broken: bool, dotted: bool, symbols: bool, wrapped: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`_unmarked`'s tokens to look at, in a _RESPELL_SHAPE `at`, in one pass: if `broken`,
    where each token starts that holds one of _MIN_MARKED marks between two letters within
    _CLOSE characters ("-" marks, and "." if `dotted`, "?" if `symbols`); if `wrapped`, each
    of _MIN_WRAPPED backticks or emphasis marks opening a token within _NEAR. Compiled at
    `warm`."""
    n = at.shape[0]
    marks = np.empty(n, dtype=np.int64)
    opens = np.empty(n, dtype=np.int64)
    k = w = 0
    for i in range(n):
        c = at[i]
        mark = c == _MARK or (dotted and c == _DOT) or (symbols and c == _SYMBOL)
        if broken and mark and 0 < i < n - 1 and at[i - 1] == _LETTER and at[i + 1] == _LETTER:
            marks[k] = i
            k += 1
        opening = i == 0 or at[i - 1] == _SPACE or at[i - 1] == _NEWLINE
        if wrapped and c in (_EMPHASIS, _BACKTICK) and opening:
            opens[w] = i
            w += 1
    kept = _clustered(marks, k, _MIN_MARKED, _CLOSE)
    starts = np.empty(len(kept), dtype=np.int64)  # after the last space or line break before each
    s = 0
    gap = -1
    p = 0
    for m in kept:
        while p < m:
            if at[p] == _SPACE or at[p] == _NEWLINE:
                gap = p
            p += 1
        if s == 0 or starts[s - 1] != gap + 1:
            starts[s] = gap + 1
            s += 1
    return starts[:s], _clustered(opens, w, _MIN_WRAPPED, _NEAR)


def _rewritten(
    text: str,
    starts: list[int],
    plainly: Callable[[str], str | None],
    enough: Callable[[int, list[str]], bool],
    least: int,
) -> tuple[str, int]:
    """`text` with the tokens at `starts` written `plainly` in each stretch where `least`
    or more of them change, each within _NEAR characters of the next, and `enough` of the
    stretch's tokens do."""
    tokens = (_TOKEN.match(text, at) for at in starts)
    changed = [(t, c) for t in tokens if t is not None and (c := plainly(t.group(0))) is not None]
    changes, found = [], 0
    i = 0
    while i + least <= len(changed):
        if changed[i + least - 1][0].start() - changed[i][0].start() > _NEAR:
            i += 1
            continue
        j = i + least  # the stretch goes on while the next changed token is near
        while j < len(changed) and changed[j][0].start() - changed[j - 1][0].start() <= _NEAR:
            j += 1
        stretch = changed[i:j]
        if enough(len(stretch), text[stretch[0][0].start() : stretch[-1][0].end()].split()):
            changes += [(token.start(), token.end(), plain_token) for token, plain_token in stretch]
            found += 1
        i = j
    return spliced(text, changes)[0], found


def _unbroken(token: str) -> str | None:
    """`token` with the mark inside its word removed, if that spells a word its parts do
    not ("ig-nore", "a.l.l"; not "built-in", "well-known", "os.path")."""
    quick = token.isascii() and "." not in token
    if quick and token.strip(_EDGES).translate(_NO_MARKS).lower() not in known_words():
        return None  # the common case, a compound, at the cost of a few string methods
    core = _CORE.search(token)
    if core is None or (m := _BROKEN.fullmatch(core.group(0))) is None:
        return None
    parts = core.group(0).split(m.group(1))
    joined = "".join(parts)
    if m.group(1) == "." and (any(len(p) > 1 for p in parts) or len(parts) < 3 or joined.isupper()):
        return None  # a path, a name, a sentence's end; "i.e.", "a.m.", "U.S.A."
    known = known_words()
    if m.group(1) != "." and len(joined) < 4 and all(len(p) == 1 for p in parts):
        return None  # "a+b+c", "r-y"
    if joined.lower() not in known or all(len(p) > 2 and p.lower() in known for p in parts):
        return None  # no word, or a compound of words ("any-one")
    return token[: core.start()] + joined + token[core.end() :]


def _unwrapped(token: str) -> str | None:
    """`token` without its marks, if it is one word wrapped in backticks or emphasis."""
    m = _WRAPPED_WORD.fullmatch(token)
    if m is None:
        return None  # a list's item ("`key`,"), a name ("_global_log"), a letter ("**S**ituation")
    word = m.group(2)
    if (
        len(word) < 3
        or word.isupper()
        or ("'" not in word and "\u2019" not in word and word.lower() not in known_words())
    ):
        return None  # a constant or a name wrapped as code, not a word: "`GET`", "`json` `yaml` `toml`"
    return token.replace(m.group(1), "")


def _broken_enough(n: int, tokens: list[str]) -> bool:
    return 3 * n >= sum(1 for t in tokens if _CORE.search(t))


def _wrapped_enough(n: int, tokens: list[str]) -> bool:
    """Whether `n` wrapped words make a disguise of these tokens: most of their words of
    four letters or more, and a sentence, not a list of names that are words ("`class`
    `count` `filter`", "`Header` `Path` `Query`"), so a function word among them."""
    long = sum(1 for t in tokens if sum(c.isalpha() for c in t) >= 4)
    return n >= _WRAPPED_SHARE * long and any(t.strip(_EDGES).lower() in _FUNCTION_WORDS for t in tokens)


@numba.njit(cache=True, nogil=True)
def _joined_spans(raw: np.ndarray, classes: np.ndarray, joins: int) -> np.ndarray:
    """`_unjoined`'s candidates: (start, end) of each run of `raw` (`_join_view`) between
    ASCII whitespace that holds an ASCII letter and `joins` or more places where two words
    could meet: a run of "_" or "-" inside it, a "?" (a non-ASCII character that is not a
    letter: an emoji between two words), and a capital after a lowercase letter, after
    a mark, or before a lowercase letter after another capital ("APIKey"); less the runs
    with a mark inside a word that no reading takes ("a.b" with "_" or "-", "Client(t"
    without). `classes` is _JOIN_CLASS. Every token `_unjoined_token` takes is in one (a
    test checks); "__init__", "-----", code and words of other scripts mostly are not.
    Compiled at `warm`."""
    n = raw.shape[0]
    out = np.empty((n // 2 + 1, 2), dtype=np.int64)
    k = 0
    start = 0
    count = 0
    # Whether the run holds an ASCII letter; a separator between two characters of a word
    # (not at its edges, which `_unjoined_token` strips), a non-ASCII character, a mark inside
    # a word, one before a lowercase letter or a digit; `core`: a character of a word seen,
    # `pending`: a separator since.
    letters = separated = other = mark_in_word = mark_before_lower = core = pending = False
    before = _J_SPACE  # the class of the byte before, and of the one before it
    twice = _J_SPACE
    for i in range(n + 1):
        c = classes[raw[i]] if i < n else _J_SPACE
        if c == _J_SPACE:
            # A "?" may be a space of another script, which ends a token: no run with one is
            # rejected for what may be another token's mark.
            rejected = not other and (mark_in_word if separated else mark_before_lower)
            if count >= joins and letters and not rejected:
                out[k, 0] = start
                out[k, 1] = i
                k += 1
            start = i + 1
            count = 0
            letters = separated = other = mark_in_word = mark_before_lower = core = pending = False
            before = twice = _J_SPACE
            continue
        if c == _J_LOWER and before <= _J_UPPER:
            letters = core = True  # inside a word (or at a token's start): the common case
            twice = before
            before = c
            continue
        if before == _J_SEPARATOR and c != _J_SEPARATOR:
            j = i - 1  # the end of a run of separators: inside the token if it starts after its start
            while j >= start and classes[raw[j]] == _J_SEPARATOR:
                j -= 1
            count += j >= start
        if c == _J_SEPARATOR:
            pending = pending or core
        elif c == _J_OTHER:
            count += 1
            other = core = True
            separated = separated or pending
            pending = False
        elif c == _J_WORD:  # inside a word of another script: no place where two words meet
            core = True
            separated = separated or pending
            pending = False
        else:
            letters = letters or _J_LOWER <= c <= _J_UPPER
            if c <= _J_DIGIT:
                core = True
                separated = separated or pending
                pending = False
            if c == _J_UPPER and before != _J_SPACE:
                if before == _J_LOWER or before >= _J_APOSTROPHE:
                    count += 1  # after a lowercase letter or a mark
                elif before == _J_UPPER and i + 1 < n and classes[raw[i + 1]] == _J_LOWER:
                    count += 1  # "APIKey": a word after an acronym
            if c <= _J_DIGIT and before == _J_MARK and _J_LOWER <= twice <= _J_DIGIT:
                mark_in_word = True
                mark_before_lower = mark_before_lower or c != _J_UPPER
        twice = before
        before = c
    return out[:k]


def _join_view(text: str, raw: bytes | None = None) -> np.ndarray:
    """`text`'s bytes as `_joined_spans` reads them (`raw`: the text as ASCII bytes,
    non-ASCII as "?", if already made): a letter of another script is _WORD_BYTE, not "?",
    since no two words meet there (each character of a Japanese text would count as a
    place where they could)."""
    view = np.frombuffer(text.encode("ascii", "replace") if raw is None else raw, dtype=np.uint8)
    if text.isascii():
        return view
    points = code_points(text)
    letter = (points >= 0x80) & ((tables()[0].take(points) & F_LETTER) != 0)
    if not letter.any():
        return view
    view = view.copy()
    view[letter] = _WORD_BYTE
    return view


def _unjoined_token(token: str) -> str | None:
    """`token` written as the words it joins, if it is a sentence written as one token:
    MIN_JOINED words or more joined by "_", "-" or a symbol ("ignore_all_previous...",
    "Ignore🙂all🙂previous") or in CamelCase, most of them words, MIN_JOINED_FUNCTION of
    them function words (most identifiers name a thing: "parse_http_request_body_fast")."""
    core = token.strip(_EDGES)
    if len(core) < 2 * MIN_JOINED:
        return None
    parts = [p for p in _JOIN.split(core) if p]
    if len(parts) == 1:
        parts = _CAMEL_WORD.findall(core)
        if "".join(parts) != core:
            return None
    if len(parts) < MIN_JOINED:
        return None
    words = [p.strip(_EDGES).lower() for p in parts]
    if not all(w.replace("'", "").isalpha() or w.isdigit() for w in words):
        return None  # a version, a hash, a name with digits: an identifier
    known = known_words()
    if sum(w in known for w in words) < _JOINED_WORDS_SHARE * len(words):
        return None
    if sum(w in _FUNCTION_WORDS for w in words) < MIN_JOINED_FUNCTION:
        return None
    at = token.index(core)
    return token[:at] + " ".join(parts) + token[at + len(core) :]


def unjoined(text: str, raw: bytes | None = None) -> tuple[str, int]:
    """Sentences written as one token (`_unjoined_token`) written as words, and how many;
    `raw`: the text as ASCII bytes, non-ASCII as "?", if already made. A text classifier
    reads such a token as one unknown word, the model upstream reads the sentence."""
    return spliced(text, _joined_changes(text, raw))


def _joined_changes(text: str, raw: bytes | None = None) -> list[tuple[int, int, str]]:
    """`_unjoined`'s changes: (start, end, the words) of each sentence written as one token."""
    changes = []
    for a, b in _joined_spans(_join_view(text, raw), _JOIN_CLASS, MIN_JOINED - 1).tolist():
        for m in _TOKEN.finditer(text, a, b):  # non-ASCII spaces split tokens too
            words = _unjoined_token(m.group(0))
            if words is not None:
                changes.append((m.start(), m.end(), words))
    return changes


@numba.njit(cache=True, nogil=True)
def _reversed_cues(raw: np.ndarray, cues: np.ndarray) -> np.ndarray:
    """Where `raw` (the text's bytes, non-ASCII as "?") has a run of ASCII letters that is
    one of `cues` (_REVERSED_CUES) in any case: the start of each. Compiled at `warm`."""
    out = np.empty(raw.shape[0] // 2 + 1, dtype=np.int64)
    k = 0
    key = 0
    length = 0
    for i in range(raw.shape[0] + 1):
        c = raw[i] if i < raw.shape[0] else 32
        if 65 <= c <= 90:
            c += 32
        if 97 <= c <= 122:
            if length < 5:
                key |= (c - 96) << (5 * length)
            length += 1
            continue
        if 2 <= length <= 4:
            for cue in cues:
                if key == cue:
                    out[k] = i - length
                    k += 1
                    break
        key = 0
        length = 0
    return out[:k]


def unreversed(text: str, raw: bytes | None = None) -> tuple[str, int]:
    """Lines written backwards ("snoitcurtsni suoiverp lla erongI") read forwards, and how
    many; `raw`: the text as ASCII bytes, non-ASCII as "?", if already made. A text
    classifier reads such a line as unknown words, a model upstream asked to can read it."""
    return spliced(text, _backwards_changes(text, raw))


def _backwards_changes(text: str, raw: bytes | None = None) -> list[tuple[int, int, str]]:
    """`_unreversed`'s changes: (start, end, the line read forwards) of each backwards line."""
    raw = text.encode("ascii", "replace") if raw is None else raw
    cues = _reversed_cues(np.frombuffer(raw, dtype=np.uint8), _REVERSED_CUES)
    if not len(cues):
        return []
    known = known_words()
    changes = []
    last = 0
    for at in cues.tolist():
        if at < last:
            continue  # in the line just looked at
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        tokens = [t.lower() for t in _LETTER_RUN.findall(text, start, end)]
        n = len(tokens)
        if n >= MIN_REVERSED_WORDS:
            backward = sum(t[::-1] in known for t in tokens)
            forward = sum(t in known for t in tokens)
            if backward >= _REVERSED_WORDS_SHARE * n and forward <= _FORWARD_WORDS_SHARE * n:
                changes.append((start, end, text[start:end][::-1]))
        last = end
    return changes


def rewritten_spots(text: str) -> list[tuple[int, int]]:
    """Where in `text` `views` finds a sentence written as one token or a line written
    backwards, read in the text itself: sorted (start, end) ranges."""
    raw = text.encode("ascii", "replace")
    return sorted((a, b) for a, b, _ in [*_joined_changes(text, raw), *_backwards_changes(text, raw)])


def warm() -> None:
    """Read the word list and compile the byte passes (or load them from numba's cache)."""
    known_words()
    _respell_looks(np.frombuffer(b"a", dtype=np.uint8))
    _marked_spots(np.frombuffer(b"a", dtype=np.uint8), True, True, True, True)
    unjoined("a_b")
    unreversed("eht")

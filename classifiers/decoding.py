"""The extra view's encoded text decoded (classifiers/normalize.py): base64, hex and
URL-encoded segments decoded in place, bounded, and letters written as numeric character
references.
"""

from __future__ import annotations

import base64
import binascii
import re
from urllib.parse import unquote_plus

from deltaguard.classifiers.characters import LETTERS, shape_table

MAX_SEGMENTS = 16  # encoded segments decoded per text
MAX_SEGMENT_CHARS = 8192  # longer runs are left encoded (a data blob, not a sentence)
MIN_SEGMENT_CHARS = 16  # shorter runs are words, ids and hashes, not encoded sentences
DECODE_ROUNDS = 2  # base64 of hex of ... decoded at most this deep
MIN_DECODED_LETTERS = 0.6  # share of letters and spaces a decoded segment needs to count as text

# Encoded segments. Candidates are cheap to find; only those that decode to text count.
_B64 = re.compile(r"(?<![\w+/=-])[A-Za-z0-9+/_-]{16,}={0,2}(?![\w+/=-])")
_HEX = re.compile(r"(?<![0-9A-Fa-f])(?:[0-9A-Fa-f]{2}){8,}(?![0-9A-Fa-f])|(?:\\x[0-9A-Fa-f]{2}){4,}")
_URL = re.compile(r"(?:[\w.~+-]*%[0-9A-Fa-f]{2}){3,}[\w.~+-]*")
_HEX_DIGITS = re.compile(r"[0-9A-Fa-f]{16}")

# Runs that could be encoded: MIN_SEGMENT_CHARS+ characters of base64 / hex / URL escapes
# holding one that encoded text almost always has (digits, "+", "%", "\\": base64 of text
# has one ~96% of the time) and identifiers and paths mostly do not. The runs are found by
# byte searches in a view where their characters are "v": the needle ends with the byte for
# the other characters, rarer than "v" in text, so it is searched fast (a pattern tries every
# character, 15 ns each).
_RUN_VIEW = shape_table({LETTERS + b"0123456789/=_+%\\-": b"v"}, b" ")
_RUN_END = b"v" * MIN_SEGMENT_CHARS + b" "
_ENCODED_STRONG = re.compile(r"[0-9+%\\]")
_CHAR_REF = re.compile(r"&#(?:([0-9]{1,7})|[xX]([0-9a-fA-F]{1,6}));?")
MIN_CHAR_REFS = 3  # letters or digits written as references: a disguise, not markup
# Line breaks and tabs are text too: an encoded e-mail, file or tool output has many lines.
_LINE_SPACE = str.maketrans("\t\n\r", "   ")


def _is_text(decoded: str, lines: bool) -> bool:
    flat = decoded.translate(_LINE_SPACE) if lines else decoded
    if len(flat) < 4 or not flat.isprintable():
        return False
    letters = sum(c.isalpha() or c == " " for c in flat)
    return letters >= MIN_DECODED_LETTERS * len(flat) and " " in flat.strip()


def _decode_b64(segment: str) -> str | None:
    raw = segment.rstrip("=")
    if len(raw) % 4 == 1:
        return None
    alt = b"-_" if ("-" in raw or "_" in raw) else None
    try:
        return base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=alt, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _decode_hex(segment: str) -> str | None:
    try:
        return bytes.fromhex(segment.replace("\\x", "")).decode("utf-8")
    except ValueError:
        return None


def _decode_url(segment: str) -> str | None:
    return unquote_plus(segment)


def _could_be_url(run: str) -> bool:
    return run.count("%") >= 3


def _could_be_hex(run: str) -> bool:
    return "\\x" in run or _HEX_DIGITS.search(run) is not None


# Each pattern with a necessary condition for a match that costs far less than the search:
# the URL pattern backtracks over the whole run at every character (quadratic: two fifths
# of this step's time on real tool outputs, which hold many paths and URLs).
_DECODERS = (
    (_URL, _could_be_url, _decode_url),
    (_HEX, _could_be_hex, _decode_hex),
    (_B64, lambda run: True, _decode_b64),
)


def _long_runs(text: str, raw: bytes | None = None) -> list[str]:
    """Runs of MIN_SEGMENT_CHARS+ characters that could be encoded (every pattern needs one);
    `raw`: the text as ASCII bytes, non-ASCII as "?", if already made."""
    view = (text.encode("ascii", "replace") if raw is None else raw).translate(_RUN_VIEW)
    runs = set()
    at = view.find(_RUN_END)
    while at >= 0:  # the needle ends each run once, at its last MIN_SEGMENT_CHARS characters
        end = at + MIN_SEGMENT_CHARS
        runs.add(text[view.rfind(b" ", 0, at) + 1 : end])
        at = view.find(_RUN_END, end + 1)
    tail = view.rfind(b" ") + 1
    if len(view) - tail >= MIN_SEGMENT_CHARS:
        runs.add(text[tail:])
    return sorted(run for run in runs if _ENCODED_STRONG.search(run))


def decode_segments(text: str, budget: list[int], lines: bool, raw: bytes | None = None) -> tuple[str, int]:
    """Encoded segments replaced by their text, while `budget[0]` segments remain; `raw`:
    the text as ASCII bytes, non-ASCII as "?", if already made."""
    long_runs = _long_runs(text, raw)
    if not long_runs:
        return text, 0
    found = 0
    for pattern, could_match, decode in _DECODERS:
        replacements: dict[str, str] = {}
        for run in long_runs:
            if not could_match(run):
                continue
            for m in pattern.finditer(run):
                segment = m.group(0)
                if budget[0] <= 0 or len(segment) > MAX_SEGMENT_CHARS or segment in replacements:
                    continue
                decoded = decode(segment)
                if decoded is None or decoded == segment or not _is_text(decoded, lines):
                    continue
                budget[0] -= 1
                replacements[segment] = f" {decoded} "
        for segment in sorted(replacements, key=lambda s: (-len(s), s)):  # longest first: no partial hits
            text = text.replace(segment, replacements[segment])
            found += 1
        if replacements:
            long_runs = _long_runs(text)
    return text, found


def char_refs(text: str) -> tuple[str, int]:
    """Numeric character references ("&#73;", "&#x67;") written as their characters, when at
    least MIN_CHAR_REFS of them stand for letters or digits, and 1 (an encoded segment); the
    text and 0 otherwise. A page escapes markup and punctuation, never a letter: letters so
    written are a disguise (no real agent tool output or corpus text has three)."""
    if "&#" not in text:
        return text, 0

    def character(m: re.Match[str]) -> str:
        code = int(m.group(1)) if m.group(1) else int(m.group(2), 16)
        return chr(code) if 0 < code < 0x110000 and not 0xD800 <= code < 0xE000 else m.group(0)

    spelled = sum(1 for m in _CHAR_REF.finditer(text) if len(c := character(m)) == 1 and c.isalnum())
    if spelled < MIN_CHAR_REFS:
        return text, 0
    return _CHAR_REF.sub(character, text), 1

"""What each character is, for the normaliser's passes (classifiers/normalize.py and the
modules of its extra view): per code point, one table of flags (invisible, a look-alike of a
Latin letter, a combining mark, Latin, a letter) and the Latin letter it folds to, tables of
one-character classes, and per byte the shapes the byte-level searches read.
"""

from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np

# Characters nothing renders: soft hyphen, combining grapheme joiner, zero-width and
# joiners, bidi controls, word joiners and invisible operators, Hangul fillers, variation
# selectors, interlinear annotation, format controls of Egyptian hieroglyphs and of
# shorthand, musical format controls, tag characters.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE007F),
    (0xE0100, 0xE01EF),
)
# Latin small capitals (phonetic letters) read as the capitals they look like, and NFKC
# leaves them: "ɪɢɴᴏʀᴇ ᴀʟʟ" is Latin text, folded like any other look-alike.
_SMALL_CAPITALS = dict(zip("ᴀʙᴄᴅᴇꜰɢʜɪᴊᴋʟᴍɴᴏᴘꞯʀꜱᴛᴜᴠᴡʏᴢ", "abcdefghijklmnopqrstuvwyz", strict=True))

# Look-alikes of Latin letters in Cyrillic, Greek, Armenian and a few symbols that NFKC
# leaves alone (fullwidth and mathematical letters NFKC folds itself).
CONFUSABLE_MAP = {
    **dict(zip("аВсеԁһіјӏКМНорԛѕТԝхуАСЕНІЈОРЅХУЬ", "aBcedhijlKMHopqsTwxyACEHIJOPSXYb", strict=True)),
    **dict(zip("αβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧϲϳ", "aBeikvoptuxABEZHIKMNOPTYXcj", strict=True)),
    **dict(zip("ցհոսօ", "ghnuo", strict=True)),
    **dict(zip("ıȷɡℓ∕‐‑‒–—‘’“”", "ijgl/-----''\"\"", strict=True)),
    **_SMALL_CAPITALS,  # and the small capitals
}

# Per code point flags, for the Unicode checks in one numpy gather.
F_INVISIBLE, F_CONFUSABLE, F_MARK, F_LATIN, F_LETTER = 1, 2, 4, 8, 16


def shape_table(mapping: dict[bytes, bytes], default: bytes) -> bytes:
    """A table for `bytes.translate`: each byte of a key becomes its value (one byte), every
    other byte `default`."""
    table = bytearray(default * 256)
    for chars, code in mapping.items():
        for c in chars:
            table[c] = code[0]
    return bytes(table)


LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@functools.cache
def tables() -> tuple[np.ndarray, np.ndarray]:
    """Per code point: its flags, and the Latin letter it folds to (itself if none)."""
    flags = np.zeros(0x110000, dtype=np.uint8)
    for lo, hi in _INVISIBLE_RANGES:
        flags[lo : hi + 1] |= F_INVISIBLE
    flags[[ord(c) for c in CONFUSABLE_MAP]] |= F_CONFUSABLE
    flags[code_point_class(r"[^\W\d_]")] |= F_LETTER
    flags[[i for i in range(0x300, 0x20000) if unicodedata.combining(chr(i))]] |= F_MARK
    flags[np.frombuffer(LETTERS, dtype=np.uint8)] |= F_LATIN
    flags[[ord(c) for c in _SMALL_CAPITALS]] |= F_LATIN
    fold = np.arange(0x110000, dtype="<u4")
    fold[[ord(c) for c in CONFUSABLE_MAP]] = [ord(c) for c in CONFUSABLE_MAP.values()]
    flags.flags.writeable = fold.flags.writeable = False
    return flags, fold


def code_points(text: str) -> np.ndarray:
    """`text`'s code points, lone surrogates too, one uint32 each."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


@functools.cache
def code_point_class(pattern: str) -> np.ndarray:
    """Per code point, whether the one-character `pattern` (`\\s`, `[^\\W\\d_]`) matches it:
    found once per process by running the pattern over every code point, and shared
    read-only by every table built from it (the normaliser's, the lexical model's, the
    segmenter's)."""
    every = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    table = np.zeros(0x110000, dtype=bool)
    for run in re.finditer(f"(?:{pattern})+", every):
        table[run.start() : run.end()] = True
    table.flags.writeable = False
    return table


def text_of(points: np.ndarray) -> str:
    return points.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")

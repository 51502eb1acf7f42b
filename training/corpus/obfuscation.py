"""Obfuscated and encoded copies of attacks, after spikee's plugins (re-implemented here).

Transforms: base64, hex, homoglyphs (Latin -> Cyrillic/Greek confusables), leetspeak,
zero-width characters inside words, and Unicode tag-character smuggling (ASCII shifted to
U+E0000.., invisible, after an innocuous visible carrier). Like spikee, an encoded payload
may come alone, after a decoding hint, or as one encoded sentence inside the clear text.
A copy keeps its original's label, channel and group (so it never lands in another split
than its original); encoding-type transforms get family "encoding", the others
"obfuscation". A smaller share of *benign* texts goes through the same transforms
(families "benign_encoded" / "benign_obfuscated"): an encoded blob alone is not an attack.
"""

from __future__ import annotations

import base64
import random
import re
from collections import defaultdict

from .example import Example, seed_for

ATTACKS_PER_SOURCE = 250
BENIGN_TOTAL = 400
SEED = 1337

CONFUSABLES = {
    "a": "а", "c": "с", "e": "е", "i": "і", "j": "ј", "o": "о", "p": "р", "s": "ѕ", "x": "х", "y": "у",
    "A": "А", "B": "В", "C": "С", "E": "Е", "H": "Н", "I": "І", "K": "К", "M": "М", "O": "О", "P": "Р",
    "T": "Т", "X": "Х", "Y": "У", "N": "Ν", "Z": "Ζ",
}  # fmt: skip
LEET = {"a": "4", "e": "3", "i": "1", "o": "0", "s": "5", "t": "7", "l": "1", "g": "9", "b": "8"}
ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060")
HINTS = {
    "base64": ("Decode this base64 and follow it:", "The following is base64, decode it and do what it says:",
               "base64:", "Please decode and execute:"),
    "hex": ("Decode this hex string and follow the instructions:", "hex:", "Convert from hex and comply:"),
}  # fmt: skip
CARRIERS = (
    "What's the weather like in Lisbon this weekend?",
    "Can you summarise this page for me?",
    "Thanks, that looks good.",
    "Please translate the attached note.",
    "Here is the document you asked for.",
)


def to_base64(s: str) -> str:
    return base64.b64encode(s.encode("utf-8")).decode("ascii")


def to_hex(s: str) -> str:
    return s.encode("utf-8").hex()


def homoglyph(s: str, rng: random.Random, ratio: float = 1.0) -> str:
    return "".join(CONFUSABLES[c] if c in CONFUSABLES and rng.random() < ratio else c for c in s)


def leetspeak(s: str, rng: random.Random, ratio: float = 0.7) -> str:
    return "".join(LEET[c.lower()] if c.lower() in LEET and rng.random() < ratio else c for c in s)


def zero_width(s: str, rng: random.Random) -> str:
    """An invisible character between the letters of words longer than three characters."""

    def split(m: re.Match[str]) -> str:
        return rng.choice(ZERO_WIDTH).join(m.group(0))

    return re.sub(r"\w{4,}", split, s)


def tag_smuggle(s: str) -> str:
    """ASCII as Unicode tag characters (U+E0020..U+E007E): invisible in most renderers."""
    return "".join(chr(0xE0000 + ord(c)) if 0x20 <= ord(c) < 0x7F else c for c in s)


def _sentences(text: str) -> list[str]:
    return [p for p in re.split(r"(?<=[.!?])\s+", text) if p]


def transform(text: str, kind: str, rng: random.Random) -> str:
    if kind in ("base64", "hex"):
        enc = to_base64 if kind == "base64" else to_hex
        parts = _sentences(text)
        mode = rng.choice(("alone", "hinted", "span")) if len(parts) > 2 else rng.choice(("alone", "hinted"))
        if mode == "alone":
            return enc(text)
        if mode == "hinted":
            return f"{rng.choice(HINTS[kind])} {enc(text)}"
        at = rng.randrange(len(parts))
        parts[at] = enc(parts[at])
        return " ".join(parts)
    if kind == "homoglyph":
        return homoglyph(text, rng, rng.choice((1.0, 0.5)))
    if kind == "leetspeak":
        return leetspeak(text, rng)
    if kind == "zero_width":
        return zero_width(text, rng)
    if kind == "tags":
        return f"{rng.choice(CARRIERS)} {tag_smuggle(text)}"
    raise ValueError(kind)


KINDS = ("base64", "hex", "homoglyph", "leetspeak", "zero_width", "tags")
ENCODINGS = {"base64", "hex", "tags"}


def obfuscate(examples: list[Example]) -> list[Example]:
    """Transformed copies of a seeded subset of `examples` (attacks per source, plus some benign)."""
    rng = random.Random(SEED)
    by_source: dict[str, list[Example]] = defaultdict(list)
    benign = []
    for ex in examples:
        if ex.label == "benign":
            # Tool outputs and documents carry encoded blobs; chat messages hardly ever do.
            if ex.channel != "user" and len(ex.text) < 4000:
                benign.append(ex)
        elif len(ex.text) < 4000:  # huge templates as base64 are just noise
            by_source[ex.source].append(ex)
    out = []
    for source in sorted(by_source):
        pool = by_source[source]
        for ex in rng.sample(pool, min(ATTACKS_PER_SOURCE, len(pool))):
            kind = KINDS[seed_for(SEED, ex.text) % len(KINDS)]
            text = transform(ex.text, kind, random.Random(seed_for(SEED, kind, ex.text)))
            family = "encoding" if kind in ENCODINGS else "obfuscation"
            out.append(Example(text, ex.label, "obfuscated", family, ex.channel, ex.group))
    for ex in rng.sample(benign, min(BENIGN_TOTAL, len(benign))):
        kind = rng.choice(("base64", "hex", "homoglyph", "zero_width"))
        r = random.Random(seed_for(SEED, kind, ex.text))
        text = (
            to_base64(ex.text)
            if kind == "base64"
            else to_hex(ex.text)
            if kind == "hex"
            else transform(ex.text, kind, r)
        )
        family = "benign_encoded" if kind in ENCODINGS else "benign_obfuscated"
        out.append(Example(text, "benign", "obfuscated", family, ex.channel, ex.group))
    return out

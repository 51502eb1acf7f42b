"""The one record type every source produces, and the helpers they share."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import asdict, dataclass

LABELS = ("benign", "injection", "jailbreak")
CHANNELS = ("user", "tool", "document")


@dataclass(frozen=True)
class Example:
    """One labelled text.

    label: benign / injection (tries to redirect the model's task or leak its context) /
      jailbreak (tries to get harmful content past the model's safety training).
    source: the dataset it came from; family: attack family (or "benign", or a benign
      kind for hard negatives); channel: where the text reaches the model.
    group: texts that are near-duplicates of each other (same template, same base
      document, clean/injected pair, an obfuscated copy and its original) share a group,
      so that a split by group never leaks.
    """

    text: str
    label: str
    source: str
    family: str
    channel: str
    group: str

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"label {self.label!r} not in {LABELS}")
        if self.channel not in CHANNELS:
            raise ValueError(f"channel {self.channel!r} not in {CHANNELS}")
        if not self.text.strip():
            raise ValueError(f"empty text from {self.source}/{self.group}")

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """The dedup key: NFKC, case-folded, whitespace collapsed."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip().casefold()


def digest(text: str, n: int = 12) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def text_group(source: str, text: str) -> str:
    """The group of a stand-alone row: its normalised text (exact re-posts stay together)."""
    return f"{source}:{digest(normalise(text))}"


def seed_for(*parts: object) -> int:
    """A stable per-purpose seed (Python's hash() is salted per process)."""
    return int(hashlib.sha256("\0".join(map(str, parts)).encode("utf-8")).hexdigest()[:15], 16)


# -- best-effort attack family for sources without metadata ---------------------------------

_FAMILY_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("encoding", re.compile(r"\bbase ?64\b|\brot-?13\b|\bhex(adecimal)?\b|\bmorse\b|\bbinary code\b", re.I)),
    (
        "extraction",
        re.compile(
            r"\b(system|initial|original|hidden|secret|first|internal|foundational|core)\s+(prompt|instructions?|"
            r"message|directives?|rules|guidelines|configuration|settings|text)\b"
            r"|\b(reveal|print|show|repeat|output|display|leak|disclose|share|dump|expose|list|recite|tell "
            r"me)\b"
            r".{0,40}\b(prompt|instructions?|configuration|rules|directives?|password|secret|guidelines|"
            r"initiali[sz]ation|programming|training data)\b"
            r"|\b(your|the) (prompt|configuration|initiali[sz]ation|instructions|guidelines|directives)\b"
            r"|\bsharing (the |your )?prompt\b",
            re.I,
        ),
    ),
    (
        "exfiltration",
        re.compile(r"\bsend\b.{0,60}\b(to|via)\b.{0,30}(https?://|@|\bemail\b)|!\[.*\]\(http", re.I),
    ),
    (
        "persona",
        re.compile(
            r"\byou are now\b|\bpretend\b|\bact as\b|\brole-?play|\bDAN\b|\bdo anything now\b|\bbecome\b"
            r"|\bdeveloper mode\b|\bjailbr(e|o)ak|\bin character\b|\bimagine you\b|\bfrom now on you\b",
            re.I,
        ),
    ),
    (
        "override",
        re.compile(
            r"\b(ignore|disregard|forget|override|bypass|skip|abandon|drop|stop "
            r"following)\b.{0,40}\b(previous|"
            r"prior|above|all|earlier|your|rules|instructions?|guidelines|restrictions|filters?|safety)\b"
            r"|\bnew instructions?\b|\binstead\b|\bno (longer|restrictions|rules|limits|filters?)\b"
            r"|\b(unrestricted|unfiltered|uncensored)\b|\b(admin|debug|god|maintenance) mode\b",
            re.I,
        ),
    ),
    (
        "social_engineering",
        re.compile(
            r"\brefus(e|al|ing)\b|\bauthori[sz](ed|ation)\b|\bofficial\b|\bsubpoena\b"
            r"|\b(engineering|security) team\b"
            r"|\bdeveloper\b|\badministrator\b|\blegal(ly)?\b|\bcompliance\b|\baudit\b|\bemergency\b"
            r"|\burgent(ly)?\b|\bpermission\b|\btrust me\b|\bother (ai|assistants?|models?)\b",
            re.I,
        ),
    ),
    (
        "framing",
        re.compile(
            r"\bhypothetical(ly)?\b|\bimagine\b|\bin a (story|novel|game|world)\b|\bfiction(al)?\b"
            r"|\bphilosophically\b|\btheoretically\b|\bfor (research|educational) purposes\b",
            re.I,
        ),
    ),
)
_B64 = re.compile(r"(?<![\w/+])(?=[A-Za-z0-9+/]*[0-9+/])[A-Za-z0-9+/]{16,}={0,2}(?![\w/+])")
_LEET = re.compile(r"[a-z][0-9@$][a-z]|\b[0-9@$][a-z]{2,}\b|\b[a-z]{2,}[0-9@$]+[a-z]", re.I)


def guess_family(text: str) -> str:
    """Keyword rules for rows that carry no attack-family metadata (S-Labs, deepset)."""
    if _B64.search(text):
        return "encoding"
    if _LEET.search(text):
        return "obfuscation"
    for family, pattern in _FAMILY_RULES:
        if pattern.search(text):
            return family
    return "other"


# -- language guess (only to tell English rows from the rest) ------------------------------

_EN_WORDS = frozenset(
    "the a an and or of to in is are you your me my i it this that what with for be do not all any "
    "can how please tell show from now on as if".split()
)
_OTHER_WORDS = frozenset(
    "der die das und ist nicht ich du dein deine mir sie zu mit von den "  # de
    "le la les et est pas je tu ton ta tes moi vous de des du une un "  # fr
    "el los las y es no yo tú tu mi que por para con una "  # es
    "il lo gli e è non io di che per con una "  # it
    "o os as é não eu você teu tua meu minha que com uma um".split()  # pt
)


def is_english(text: str) -> bool:
    words = re.findall(r"[^\W\d_]+", text.lower())
    if not words:
        return True
    if sum(ord(c) > 127 for c in text) > 0.15 * len(text):
        return False
    en = sum(w in _EN_WORDS for w in words)
    other = sum(w in _OTHER_WORDS and w not in _EN_WORDS for w in words)
    return en >= other

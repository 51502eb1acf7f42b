"""Redaction of secret and PII values in recorded items.

Redaction reruns the secrets and PII rules (`deltaguard.classifiers.secrets.SECRET_RULES`,
`deltaguard.classifiers.pii.PII_RULES`: their patterns and validators) over each channel's text
stream, so a value split across two items is found and redacted in both, plus plain
regexes for PEM private key blocks and JWTs. Each value becomes `[REDACTED:<kind>]`.

Every other string an item carries is redacted on its own by the same rules: the fields
DeltaGuard does not score (`metadata`, ids, unknown fields, parts of other types) and the
keys of every object, since a recording stores the whole item and the review page and the
export show it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deltaguard.classifiers.pii import PII_RULES
from deltaguard.classifiers.rules import Rule, channel
from deltaguard.classifiers.secrets import SECRET_RULES
from deltaguard.items import TEXT_PART_TYPES, Item

# Rules whose match includes a key name ("API_KEY = value"): only the value is redacted.
_VALUE_GROUPS = ("val", "v")
_PEM_LABEL = r"(?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?"
# A whole block when its END marker follows within 64 kB; otherwise the BEGIN marker and
# the base64 lines after it (real or JSON-escaped newlines).
_PEM = re.compile(
    rf"-----BEGIN {_PEM_LABEL}-----"
    rf"(?:[\s\S]{{0,65536}}?-----END {_PEM_LABEL}-----|(?:[A-Za-z0-9+/=]+(?:\\n|\\r|\r|\n)*)*)",
    re.ASCII,
)
_JWT = re.compile(r"(?<![A-Za-z0-9_.-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{16,}", re.ASCII)
_RULESETS: tuple[tuple[str, tuple[Rule, ...]], ...] = (("secrets", SECRET_RULES), ("pii", PII_RULES))


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    category: str
    kind: str


def find_sensitive(text: str) -> list[Span]:
    """Secret and PII values in `text`, as non-overlapping spans in text order.

    >>> [(s.kind, s.start) for s in find_sensitive("key AKIAQWERTYUIOPASDFGH ok")]
    [('aws_access_key_id', 4)]
    """
    spans: list[Span] = []
    for category, rules in _RULESETS:
        for rl in rules:
            if rl.trigger is not None and rl.trigger.search(text) is None:
                continue
            group = next((g for g in _VALUE_GROUPS if g in rl.pattern.groupindex), "m")
            for m in rl.pattern.finditer(text):
                hit = rl.check(m)
                if hit is not None and m.start(group) >= 0:
                    spans.append(Span(m.start(group), m.end(group), category, hit.kind))
    spans += [Span(m.start(), m.end(), "secrets", "private_key") for m in _PEM.finditer(text)]
    spans += [Span(m.start(), m.end(), "secrets", "jwt") for m in _JWT.finditer(text)]
    return _merge(spans)


def _merge(spans: list[Span]) -> list[Span]:
    """Union of overlapping spans; a merged span keeps the kind of its longest part."""
    out: list[Span] = []
    best: Span | None = None
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if out and s.start < out[-1].end:
            last = out[-1]
            if best is None or s.end - s.start > best.end - best.start:
                best = s
            out[-1] = Span(last.start, max(last.end, s.end), best.category, best.kind)
        else:
            out.append(s)
            best = s
    return [s for s in out if s.end > s.start]


def _mask(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclass
class Redactions:
    """What redaction replaced: counts per kind, their categories, the items changed."""

    kinds: dict[str, int] = field(default_factory=dict)
    categories: set[str] = field(default_factory=set)
    items: list[int] = field(default_factory=list)  # indices of the items that changed
    kind_categories: dict[str, str] = field(default_factory=dict)  # kind -> its category
    # Per scored item redacted in its channel's stream: the (start, end, mask length) of
    # each cut in its text view, to move character ranges onto the redacted text.
    edits: dict[int, list[tuple[int, int, int]]] = field(default_factory=dict)

    def add(self, span: Span) -> None:
        self.kinds[span.kind] = self.kinds.get(span.kind, 0) + 1
        self.categories.add(span.category)
        self.kind_categories[span.kind] = span.category


# A place a string lives in a wire item, and its offset in the item's text view.
_Ref = tuple[Any, Any]  # (container, key)


def _segments(raw: dict[str, Any], item: Item) -> list[tuple[int, _Ref]] | None:
    """Where each string of the item's text view comes from (mirrors `parse_item`).

    Returns (offset in `item.text`, reference) pairs, or None when the raw item does not
    rebuild `item.text` (then every string of the item is redacted on its own).
    """
    refs: list[tuple[int, _Ref]] = []
    pieces: list[str] = []

    def text_field(container: Any, key: Any) -> None:
        value = container.get(key)
        if isinstance(value, str):
            refs.append((len("".join(pieces)), (container, key)))
            pieces.append(value)
        elif isinstance(value, list):
            first = True
            for part in value:
                if not isinstance(part, dict) or part.get("type") not in TEXT_PART_TYPES:
                    continue
                part_key = "text" if part.get("text") is not None else "refusal"
                if not part.get(part_key):
                    continue
                if not first:
                    pieces.append("\n")
                first = False
                refs.append((len("".join(pieces)), (part, part_key)))
                pieces.append(part[part_key])

    kind = raw.get("type", "message")
    if kind == "message":
        text_field(raw, "content")
    elif kind == "function_call":
        refs.append((0, (raw, "name")))
        pieces.append(raw["name"])
        pieces.append("(")
        refs.append((len(raw["name"]) + 1, (raw, "arguments")))
        pieces.append(raw["arguments"])
        pieces.append(")")
    elif kind == "function_call_output":
        text_field(raw, "output")
    return refs if "".join(pieces) == item.text else None


def _apply(edits: dict[tuple[int, Any], tuple[_Ref, list[tuple[int, int, str]]]]) -> None:
    for ref, cuts in edits.values():
        container, key = ref
        value: str = container[key]
        for start, end, kind in sorted(cuts, reverse=True):
            value = value[:start] + _mask(kind) + value[end:]
        container[key] = value


def _redact_string(text: str, found: Redactions) -> str:
    spans = find_sensitive(text)
    for s in reversed(spans):
        text = text[: s.start] + _mask(s.kind) + text[s.end :]
        found.add(s)
    return text


def _redact_strings(obj: Any, found: Redactions, done: frozenset[tuple[int, Any]] = frozenset()) -> Any:
    """Redact every string of `obj` on its own, object keys included, but the places in
    `done` ((id of container, key): text already redacted in its channel's stream)."""
    if isinstance(obj, str):
        return _redact_string(obj, found)
    if isinstance(obj, list):
        return [v if (id(obj), i) in done else _redact_strings(v, found, done) for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            key = _redact_string(k, found) if isinstance(k, str) else k
            while key in out:  # two keys masked alike: both kept
                key += "'"
            out[key] = v if (id(obj), k) in done else _redact_strings(v, found, done)
        return out
    return obj


def redact_items(items: Sequence[Item]) -> tuple[list[dict[str, Any]], Redactions]:
    """Wire copies of `items` with secret and PII values replaced by `[REDACTED:<kind>]`.

    The scored items' texts are scanned as the rule classifiers scan them, one stream
    per channel, so a value split across items is redacted in each of its pieces.
    The input items are never modified.
    """
    found = Redactions()
    out: list[dict[str, Any]] = [copy.deepcopy(i.raw) for i in items]
    streams: dict[str, list[tuple[int, int]]] = {}  # channel -> (item index, offset)
    texts: dict[str, list[str]] = {}
    segments: dict[int, list[tuple[int, _Ref]]] = {}
    for n, item in enumerate(items):
        if not item.scored:
            out[n] = _redact_strings(out[n], found)
            continue
        segs = _segments(out[n], item)
        if segs is None:
            out[n] = _redact_strings(out[n], found)
            continue
        if not item.text:
            out[n] = _redact_strings(out[n], found)
            continue
        segments[n] = segs
        ch = channel(item)
        parts = texts.setdefault(ch, [])
        offset = sum(len(p) for p in parts)
        streams.setdefault(ch, []).append((n, offset))
        parts.append(item.text)
    for ch, parts in texts.items():
        stream = "".join(parts)
        spans = find_sensitive(stream)
        if not spans:
            continue
        edits: dict[tuple[int, Any], tuple[_Ref, list[tuple[int, int, str]]]] = {}
        for n, base in streams[ch]:
            for seg_at, ref in segments[n]:
                lo = base + seg_at
                hi = lo + len(ref[0][ref[1]])
                for s in spans:
                    if s.end > lo and s.start < hi:
                        cut = (max(s.start, lo) - lo, min(s.end, hi) - lo, s.kind)
                        edits.setdefault((id(ref[0]), ref[1]), (ref, []))[1].append(cut)
                        text_cut = (seg_at + cut[0], seg_at + cut[1], len(_mask(s.kind)))
                        found.edits.setdefault(n, []).append(text_cut)
        _apply(edits)
        for s in spans:
            found.add(s)
    for n, segs in segments.items():  # the rest of a scored item: metadata, ids, keys...
        out[n] = _redact_strings(out[n], found, frozenset((id(c), k) for _, (c, k) in segs))
    found.items = [n for n, item in enumerate(items) if out[n] != item.raw]
    for cuts in found.edits.values():
        cuts.sort()
    return out, found


def mask_text(text: str) -> tuple[str, list[tuple[int, int, int]]]:
    """`text` with its secret and PII values replaced by `[REDACTED:<kind>]`, and the cuts
    made, as `Redactions.edits` lists them (for `redacted_range`).

    >>> mask_text("key AKIAQWERTYUIOPASDFGH ok")
    ('key [REDACTED:aws_access_key_id] ok', [(4, 24, 28)])
    """
    spans = find_sensitive(text)
    for s in reversed(spans):
        text = text[: s.start] + _mask(s.kind) + text[s.end :]
    return text, [(s.start, s.end, len(_mask(s.kind))) for s in spans]


def redacted_range(cuts: Sequence[tuple[int, int, int]], start: int, end: int) -> tuple[int, int]:
    """The range [start, end) of a text moved onto the text with `cuts` (sorted, disjoint
    (start, end, mask length)) replaced: an end inside a cut takes in its whole mask.

    >>> redacted_range([(4, 24, 28)], 0, 10), redacted_range([(4, 24, 28)], 25, 27)
    ((0, 32), (33, 35))
    """

    def moved(at: int, inside_to_end: bool) -> int:
        shift = 0
        for lo, hi, mask in cuts:
            if at <= lo:
                break
            if at < hi:  # inside a redacted value: the mask's edge
                return lo + shift + (mask if inside_to_end else 0)
            shift += mask - (hi - lo)
        return at + shift

    return moved(start, False), max(moved(start, False), moved(end, True))

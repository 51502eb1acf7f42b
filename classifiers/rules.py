"""Rule classifiers over the scored text stream, with a bounded cross-item window.

The text of the scored items is treated as one stream, so a value split across two
items is found once, in the item where it completes. `WindowedRuleClassifier`
implements that with a bounded window:

- the state keeps the last `TAIL_CHARS` characters of scored text; each item is scanned
  as tail + text, joined without a separator so a split token rejoins;
- a rule is evaluated at *every* candidate start (not just the non-overlapping chain
  `finditer` would pick), so what the scan finds does not depend on where the window
  begins; starts within `CONTEXT_CHARS` of a cut window are skipped (their left context
  is gone; they were already evaluated by an earlier scan);
- validators may look back up to CONTEXT_CHARS before a match (always present);
- the starts of reported findings still inside the tail are kept in the state, and a
  start is reported at most once per rule: a match that ended at the previous item's end
  and now extends into the new item is the same finding, not a second one. A finding is
  thus reported in the first item whose scan validates it: where it completes, or
  earlier when a prefix is already valid on its own (a 20-char generic value that goes
  on, "bob@example.co" + "m");
- PEM blocks and JWTs can be longer than the window, so they are small automata whose
  progress (counters, not text) lives in the state.

Everything a verdict needs is in the state, so `update` is a left fold over items and
associative over item boundaries by construction.

Trying a pattern at every position costs the regex engine a full attempt per character,
so a rule may name its candidate starts instead (`Rule.starts`): positions found by
searches that run in C (a literal, or a literal on a `Buffer.view` in which a character
class is one byte), at which the pattern is then tried. Candidates are a superset of
the starts where the pattern matches, so what is found does not change.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, NamedTuple

from deltaguard.classifiers.base import (
    Finding,
    Lane,
    Scores,
    State,
    Update,
    count_tokens,
    running_max,
    zero_scores,
)
from deltaguard.items import Item

TAIL_CHARS = 512  # scored text kept between items: longest rule match + CONTEXT_CHARS
CONTEXT_CHARS = 64  # left context a start needs (lookbehinds, "private_key": prefix)
MAX_SEEN = 64  # reported starts remembered inside the tail (only pathological text has more)

# The tail is stored JSON-cheap: every character the rules cannot tell apart from any
# other non-ASCII character (all rules are ASCII-only, compiled with re.ASCII, and never
# use \s, which would treat \f and \v as spaces) becomes \x7f. A tail then costs at most
# two JSON bytes per character, and scanning it behaves exactly as scanning the original.
_OPAQUE = re.compile(r"[^\t\n\r\x20-\x7e]")
_OPAQUE_ASCII = bytes(0x7F if c < 0x20 and c not in b"\t\n\r" else c for c in range(256))


def _opaque(text: str) -> str:
    if text.isascii():  # by a byte table: the same result, many times faster
        return text.encode("ascii").translate(_OPAQUE_ASCII).decode("ascii")
    return _OPAQUE.sub("\x7f", text)


def redact(value: str) -> str:
    """A preview that never shows the whole value: at most its first and last 4 chars."""
    keep = min(4, len(value) // 4)
    return f"{value[:keep]}…{value[-keep:]}" if keep else "…"


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character distribution."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


class Hit(NamedTuple):
    """A validated detection: what it is, how sure, and a redacted preview."""

    kind: str
    score: float
    preview: str


Check = Callable[[re.Match[str]], Hit | None]
# Candidate starts in a buffer: ascending, distinct, >= buf.lo, and including every
# position >= buf.lo at which the rule's pattern matches.
Starts = Callable[["Buffer"], Iterable[int]]


@dataclass(frozen=True, slots=True)
class Rule:
    """A candidate pattern (wrapped by `rule`) and the validator that decides."""

    pattern: re.Pattern[str]
    check: Check
    trigger: re.Pattern[str] | None = None  # must occur in every match: no trigger, no scan
    starts: Starts | None = None  # where to try `pattern`; None: at every position


def rule(body: str, check: Check, trigger: str | None = None, starts: Starts | None = None) -> Rule:
    """Compile `body` so that `finditer` yields its match at every start position.

    The match is captured inside a lookahead, so the scan advances one character at a
    time instead of jumping past each match; the match text is group "m". Bodies should
    begin with a literal or a lookbehind so that a token has one start, not one per
    character.

    Scanning every position is the slow part, so `trigger`, a plain pattern that every
    match contains (a literal prefix, an "@"), lets a scan be skipped exactly when the
    text cannot match, and `starts` narrows the positions to try (see `Starts`).
    """
    return Rule(
        re.compile(rf"(?=(?P<m>{body}))", re.ASCII),
        check,
        re.compile(trigger, re.ASCII) if trigger else None,
        starts,
    )


def view_table(classes: dict[str, str], other: str) -> bytes:
    """A `Buffer.view` table: the (ASCII) chars of each key become its value, or stay
    themselves when it is empty; every other char, non-ASCII ones included, becomes `other`.
    """
    table = bytearray(other.encode("ascii") * 256)
    for chars, to in classes.items():
        for c in chars:
            table[ord(c)] = ord(to or c)
    return bytes(table)


class Buffer:
    """The text a scan reads, the first position a start may take, and views of the text.

    A view maps each char to one byte through a `view_table` table (chars outside Latin-1
    are "?" before that, which tables do not list), so its positions are the text's.
    Views and other per-buffer work are made once, on first use, and shared by the rules.
    """

    __slots__ = ("_memo", "lo", "text")

    def __init__(self, text: str, lo: int) -> None:
        self.text = text
        self.lo = lo
        self._memo: dict[Any, Any] = {}

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def view(self, table: bytes) -> bytes:
        return self.memo(table, lambda: self.text.encode("latin-1", "replace").translate(table))


def find_all(haystack: Any, needle: Any, lo: int) -> list[int]:
    """Every position >= lo at which `needle` occurs, overlapping occurrences included."""
    out = []
    i = haystack.find(needle, lo)
    while i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def literal(*needles: str) -> Starts:
    """Starts for a rule whose every match begins with one of `needles`."""

    def starts(buf: Buffer) -> list[int]:
        return sorted({i for needle in needles for i in find_all(buf.text, needle, buf.lo)})

    return starts


def anchor(pattern: str) -> Starts:
    """Starts for a rule whose every match begins where `pattern` matches.

    `pattern` must consume one literal char and check the rest with a lookahead: the
    engine then skips to that char in C, and no match hides a start after it.
    """
    compiled = re.compile(pattern, re.ASCII)

    def starts(buf: Buffer) -> list[int]:
        return [m.start() for m in compiled.finditer(buf.text, buf.lo)]

    return starts


def channel(item: Item) -> str:
    """The stream an item's text continues: tool outputs, the model's words, or the user's.

    A secret read from a file in two chunks arrives as two tool outputs with the model's
    next tool call between them; keeping one window per channel rejoins the chunks.
    """
    if item.role == "tool":
        return "tool"
    if item.role == "assistant":
        return "assistant"
    return "user"


class WindowedRuleClassifier:
    """Regex-and-validator rules over the scored text streams, with bounded windows.

    Subclasses set `name`, `version`, `categories` (one category) and `rules`; those
    with detectors longer than the window override `_blocks_initial`/`_scan_blocks`.

    State: `streams` (one per `channel`: `tail`, the last TAIL_CHARS scored chars, see
    `_opaque`; `cut`, the tail no longer starts at the beginning of the stream; `seen`,
    [rule index, distance of the start from the tail's end] of reported findings still
    in the tail; plus the subclass's block states), `scores` (running max) and `counts`
    (findings per kind).
    """

    name: str
    version: str
    categories: tuple[str, ...]
    lane: Lane = "gate"
    max_state_bytes = 12_288  # three streams of at most ~2.6 kB each, plus counts
    rules: tuple[Rule, ...] = ()

    def initial_state(self) -> State:
        return {"streams": {}, "scores": zero_scores(self.categories), "counts": {}}

    def _stream_initial(self) -> dict[str, Any]:
        return {"tail": "", "cut": False, "seen": [], **self._blocks_initial()}

    def _blocks_initial(self) -> dict[str, Any]:
        return {}

    def _scan_blocks(
        self, blocks: dict[str, Any], buf: str, new: int, lo: int
    ) -> tuple[dict[str, Any], list[tuple[int, Hit]]]:
        """Advance block automata over `buf[new:]`; hits are (position, Hit)."""
        return blocks, []

    def update(self, state: State, items: Sequence[Item]) -> Update:
        (category,) = self.categories
        streams: dict[str, dict[str, Any]] = dict(state["streams"])
        counts: dict[str, int] = dict(state["counts"])
        item_scores: list[Scores] = []
        findings: list[Finding] = []
        tokens = 0
        for index, item in enumerate(items):
            if not item.scored or not item.text:  # nothing new to scan; the window stays
                item_scores.append(zero_scores(self.categories))
                continue
            ch = channel(item)
            stream = streams.get(ch) or self._stream_initial()
            tail: str = stream["tail"]
            cut: bool = stream["cut"]
            blocks = {key: stream[key] for key in self._blocks_initial()}
            buf = tail + item.text
            new = len(tail)
            tokens += item.tokens + count_tokens(tail)
            lo = CONTEXT_CHARS if cut else 0
            scan = Buffer(buf, lo)
            reported = {(r, new - dist) for r, dist in stream["seen"]}
            hits: list[tuple[int, int, Hit]] = []
            for r, rl in enumerate(self.rules):
                if rl.starts is not None:
                    matches = filter(None, map(rl.pattern.match, repeat(buf), rl.starts(scan)))
                elif rl.trigger is None or rl.trigger.search(buf, lo) is not None:
                    matches = rl.pattern.finditer(buf, lo)
                else:
                    continue
                for m in matches:
                    start = m.start()
                    if (r, start) in reported:
                        continue
                    hit = rl.check(m)
                    if hit is not None:
                        reported.add((r, start))
                        hits.append((m.end("m"), r, hit))
            blocks, block_hits = self._scan_blocks(blocks, buf, new, lo)
            hits.extend((pos, len(self.rules), hit) for pos, hit in block_hits)
            hits.sort(key=lambda h: (h[0], h[1]))
            best = 0.0
            for _, _, hit in hits:
                best = max(best, hit.score)
                counts[hit.kind] = counts.get(hit.kind, 0) + 1
                findings.append(Finding(category, hit.kind, index, hit.preview))
            item_scores.append({category: best})
            keep_from = max(0, len(buf) - TAIL_CHARS)
            # The starts nearest the end matter most; MAX_SEEN bounds the state.
            kept = ([r, len(buf) - s] for r, s in reported if s >= keep_from)
            streams[ch] = {
                "tail": _opaque(buf[keep_from:]),
                "cut": cut or keep_from > 0,
                "seen": sorted(kept, key=lambda e: (e[1], e[0]))[:MAX_SEEN],
                **{key: dict(value) if value else value for key, value in blocks.items()},
            }
        scores = running_max(state["scores"], item_scores)
        new_state: State = {"streams": streams, "scores": dict(scores), "counts": counts}
        return Update(new_state, item_scores, scores, tokens, findings)

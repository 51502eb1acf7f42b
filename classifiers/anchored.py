"""A union of regular expressions searched only where it can match.

Python's engine tries every alternative of a union at every position of a text: a union of
130 patterns costs 130 scans. Most alternatives open with a literal ("force", "chmod",
"pull_request_target"), and a text that holds none of an alternative's opening literals
cannot match it. `AnchoredUnion` splits a union into its alternatives, finds each one's
opening literals by parsing it, and scans a text only with the alternatives whose literal
it holds (an alternative with no opening literal is always scanned). The answer is the
union's own: the literals are a necessary condition, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

try:  # the standard library's parser; without it every alternative is scanned, as the union would be
    from re import _parser as sre_parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a Python without the private parser
    sre_parser = None

MAX_LITERALS = 32  # an alternative with more opening literals than this is always scanned
_ZERO_WIDTH = ("AT", "ASSERT", "ASSERT_NOT")  # boundaries and lookarounds: the match's text starts after them


def alternatives(pattern: str) -> list[str]:
    """`pattern`'s top-level alternatives, as source text ('|'.join gives it back)."""
    out: list[str] = []
    depth, in_class, start, i = 0, False, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":  # a leading ']' is a member, not the end
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    return out


def opening_literals(pattern: str) -> tuple[str, ...] | None:
    """Literals one of which opens every match of `pattern`; None where none can be named."""
    if sre_parser is None:
        return None
    try:
        parsed = sre_parser.parse(pattern)
    except re.error:
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    found = _openings(list(parsed))
    if not found or "" in found:
        return None
    return tuple(sorted(found))


def _openings(items: list) -> set[str] | None:
    """The literal prefixes a sequence of parsed items can open with, or None where one is empty."""
    prefixes = {""}
    for op, av in items:
        name = str(op)
        if name in _ZERO_WIDTH:
            continue
        if name == "LITERAL":
            prefixes = {p + chr(av) for p in prefixes}
            continue
        inner: set[str] | None = None
        if name == "SUBPATTERN" and not av[1] & re.IGNORECASE:
            inner = _openings(list(av[-1]))
        elif name == "IN":
            inner = _members(av)
        elif name == "BRANCH":
            inner = set()
            for branch in av[1]:
                sub = _openings(list(branch))
                if sub is None:
                    inner = None
                    break
                inner |= sub
        if inner is None or "" in inner:
            break
        longer = {p + q for p in prefixes for q in inner}
        if len(longer) > MAX_LITERALS:
            break  # the literals so far are enough
        prefixes = longer
        if name != "IN":
            break  # past a group the literals may go on in many ways: its openings are enough
    return None if "" in prefixes else prefixes


def _members(items: list) -> set[str] | None:
    """The characters a set names, where it names only characters and short ranges."""
    out: set[str] = set()
    for op, av in items:
        if str(op) == "LITERAL":
            out.add(chr(av))
        elif str(op) == "RANGE" and av[1] - av[0] < MAX_LITERALS:
            out.update(chr(c) for c in range(av[0], av[1] + 1))
        else:  # a negation, a category (\w, \s), a wide range
            return None
    return out


class AnchoredUnion:
    """`search(text)`: whether any of `patterns` matches `text`, as their union's search
    would say, scanning only the alternatives whose opening literal the text holds."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._always: list[re.Pattern[str]] = []
        self._anchored: list[re.Pattern[str]] = []
        by_literal: dict[str, list[int]] = {}
        for pattern in patterns:
            for alternative in alternatives(pattern):
                compiled = re.compile(alternative)
                literals = opening_literals(alternative)
                if literals is None:
                    self._always.append(compiled)
                    continue
                for literal in literals:
                    by_literal.setdefault(literal, []).append(len(self._anchored))
                self._anchored.append(compiled)
        self._by_literal = {literal: tuple(at) for literal, at in by_literal.items()}

    @property
    def always_scanned(self) -> int:
        """How many alternatives have no opening literal (each is scanned on every text)."""
        return len(self._always)

    def search(self, text: str) -> bool:
        # one substring test per literal, then only the alternatives a literal found opens
        held = [at for literal, at in self._by_literal.items() if literal in text]
        if held:
            for i in sorted({i for at in held for i in at}):
                if self._anchored[i].search(text):
                    return True
        return any(compiled.search(text) for compiled in self._always)

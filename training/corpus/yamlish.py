"""A small YAML reader for the data files of these wheels (PyYAML is not a dependency).

It covers what agentdojo, raginject and PyRIT's templates use: block mappings and
sequences (including compact `- key: value` items), plain / single- / double-quoted
scalars (multi-line too), `|` and `>` block scalars with chomping indicators, empty
and simple flow collections, comments and tags (a tag such as `!include x` is kept as
{"!include": "x"}). Anchors, aliases, complex keys and multi-document streams are not
supported and fail loudly instead of being misread.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["YamlError", "loads"]


class YamlError(ValueError):
    pass


_KEY = re.compile(
    r"""^(?P<key>"(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s#'"\-?:][^#]*?|-[^\s][^#]*?)\s*:(?:\s+|$)"""
)
_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)$")
_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v", "f": "\f", "r": "\r",
    "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", "N": "\x85", "_": "\xa0",
}  # fmt: skip


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _is_content(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _strip_comment(s: str) -> str:
    """A plain scalar ends at ' #'."""
    m = re.search(r"\s#", s)
    return s[: m.start()].rstrip() if m else s.rstrip()


def _unescape_double(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1] if i + 1 < len(body) else ""
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            out.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            raise YamlError(f"unknown escape \\{nxt} in {body[:60]!r}")
    return "".join(out)


def _fold_lines(parts: list[str]) -> str:
    """Flow-scalar line folding: one break is a space, n breaks are n-1 newlines."""
    out = ""
    empties = 0
    for k, part in enumerate(parts):
        p = part.strip() if 0 < k < len(parts) - 1 else (part.rstrip() if k == 0 else part.lstrip())
        if k > 0 and not p and k < len(parts) - 1:
            empties += 1
            continue
        if k > 0:
            out += "\n" * empties if empties else " "
        out += p
        empties = 0
    return out


def _scalar(text: str) -> Any:
    s = text.strip()
    if s in ("", "~", "null", "Null", "NULL"):
        return None
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if _INT.match(s):
        return int(s)
    if _FLOAT.match(s):
        return float(s)
    return s


def _flow(s: str) -> Any:
    """Empty or one-line flow collections of scalars: [], {}, ["a", b]."""
    inner = s[1:-1].strip()
    if not inner:
        return [] if s[0] == "[" else {}
    if s[0] == "{":
        raise YamlError(f"non-empty flow mapping not supported: {s[:60]!r}")
    items = re.findall(r"""\s*("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^,]+)\s*(?:,|$)""", inner)
    return [_quoted_or_plain(item.strip()) for item in items]


def _quoted_or_plain(s: str) -> Any:
    if s.startswith('"') and s.endswith('"') and len(s) > 1:
        return _unescape_double(s[1:-1])
    if s.startswith("'") and s.endswith("'") and len(s) > 1:
        return s[1:-1].replace("''", "'")
    return _scalar(s)


class _Parser:
    def __init__(self, text: str) -> None:
        if re.search(r"^\s*(-|[^#\s][^#]*?:)\s+[&*]\w", text, re.M):
            raise YamlError("anchors and aliases are not supported")
        self.lines = [ln.rstrip("\r") for ln in text.split("\n")]
        if self.lines and self.lines[0].rstrip() == "---":  # a document start marker
            self.lines[0] = ""
        if any("\t" in ln[: _indent(ln) + 1] for ln in self.lines if _is_content(ln)):
            raise YamlError("tab indentation")

    def _next(self, i: int) -> int:
        while i < len(self.lines) and not _is_content(self.lines[i]):
            i += 1
        return i

    def parse(self) -> Any:
        i = self._next(0)
        if i >= len(self.lines):
            return None
        value, i = self.node(i, _indent(self.lines[i]))
        if self._next(i) < len(self.lines):
            raise YamlError(
                f"unparsed content at line {self._next(i) + 1}: {self.lines[self._next(i)][:60]!r}"
            )
        return value

    def node(self, i: int, indent: int) -> tuple[Any, int]:
        line = self.lines[i]
        rest = line[indent:]
        if rest == "-" or rest.startswith("- "):
            return self.sequence(i, indent)
        if _KEY.match(rest):
            return self.mapping(i, indent)
        return self.flow_scalar(i, indent, rest, indent - 1)

    def sequence(self, i: int, indent: int) -> tuple[list[Any], int]:
        items: list[Any] = []
        while i < len(self.lines):
            line = self.lines[i]
            if _indent(line) != indent or not (line[indent:] == "-" or line[indent:].startswith("- ")):
                break
            rest = line[indent + 1 :].lstrip(" ")
            if not rest or rest.startswith("#"):
                j = self._next(i + 1)
                if j < len(self.lines) and _indent(self.lines[j]) > indent:
                    value, i = self.node(j, _indent(self.lines[j]))
                else:
                    value, i = None, i + 1
            else:
                col = len(line) - len(rest)
                # A compact item ("- key: v", "- - x"): re-read the line as if indented to `col`.
                self.lines[i] = " " * col + rest
                value, i = self.node(i, col)
            items.append(value)
            i = self._next(i)
        return items, i

    def mapping(self, i: int, indent: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        while i < len(self.lines):
            line = self.lines[i]
            if _indent(line) != indent:
                if _indent(line) > indent:
                    raise YamlError(f"unexpected indentation at line {i + 1}: {line[:60]!r}")
                break
            m = _KEY.match(line[indent:])
            if not m:
                break
            key = _quoted_or_plain(m.group("key").strip())
            key = key if isinstance(key, str) else str(key).lower() if isinstance(key, bool) else str(key)
            rest = line[indent + m.end() :]
            out[key], i = self.value(i, indent, rest)
            i = self._next(i)
        return out, i

    def value(self, i: int, indent: int, rest: str) -> tuple[Any, int]:
        """The value after `key:` on line i (the key sits at `indent`)."""
        rest = rest.strip()
        if rest.startswith("!"):
            tag, _, arg = rest.partition(" ")
            return {tag: _quoted_or_plain(arg.strip())}, i + 1
        if rest.startswith(("|", ">")):
            return self.block_scalar(i, indent, rest)
        if not rest or rest.startswith("#"):
            j = self._next(i + 1)
            if j < len(self.lines):
                nxt = self.lines[j]
                ind = _indent(nxt)
                if ind > indent or (ind == indent and (nxt[ind:] == "-" or nxt[ind:].startswith("- "))):
                    return self.node(j, ind)
            return None, i + 1
        return self.flow_scalar(i, indent, rest, indent)

    def flow_scalar(self, i: int, indent: int, rest: str, parent: int) -> tuple[Any, int]:
        """A scalar starting with `rest` on line i; continuation lines are deeper than `parent`."""
        if rest[0] in "\"'":
            q = rest[0]
            parts = [rest[1:]]
            close = re.compile(
                r'^((?:[^"\\]|\\.)*)"(.*)$' if q == '"' else r"^((?:[^']|'')*)'(?!')(.*)$", re.S
            )
            j = i
            while True:
                m = close.match("\n".join(parts))
                if m:
                    tail = m.group(2).strip()
                    if tail and not tail.startswith("#"):
                        raise YamlError(f"text after closing quote at line {j + 1}: {tail[:40]!r}")
                    body = _fold_lines(m.group(1).split("\n"))
                    if q == '"':
                        # An escaped line break (backslash at the end of a line) joins lines.
                        body = _unescape_double(re.sub(r"\\ ", r"\\ ", body))
                    else:
                        body = body.replace("''", "'")
                    return body, j + 1
                j += 1
                if j >= len(self.lines):
                    raise YamlError(f"unterminated quoted scalar from line {i + 1}")
                parts.append(self.lines[j])
        if rest[0] in "[{":
            return _flow(_strip_comment(rest)), i + 1
        parts = [_strip_comment(rest)]
        j = i + 1
        while j < len(self.lines):
            line = self.lines[j]
            if not line.strip():
                parts.append("")
                j += 1
                continue
            if line.strip().startswith("#") or _indent(line) <= parent:
                break
            parts.append(_strip_comment(line))
            j += 1
        while parts and not parts[-1]:
            parts.pop()
            j -= 0
        if len(parts) == 1:
            return _scalar(parts[0]), j
        return _fold_lines(parts), j

    def block_scalar(self, i: int, indent: int, header: str) -> tuple[str, int]:
        style, flags = header[0], _strip_comment(header[1:]).strip()
        chomp = "-" if "-" in flags else "+" if "+" in flags else ""
        explicit = next((int(c) for c in flags if c.isdigit()), None)
        body: list[str] = []
        block_indent = indent + explicit if explicit else None
        j = i + 1
        while j < len(self.lines):
            line = self.lines[j]
            if not line.strip():
                body.append("")
                j += 1
                continue
            lead = _indent(line)
            if block_indent is None:
                if lead <= indent:
                    break
                block_indent = lead
            if lead < block_indent:
                break
            body.append(line[block_indent:])
            j += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        j -= 0
        text = "\n".join(body) if style == "|" else _fold_block(body)
        if not body:
            return "", j
        if chomp == "-":
            return text, j
        if chomp == "+":
            return text + "\n" * (trailing + 1), j
        return text + "\n", j


def _fold_block(body: list[str]) -> str:
    """`>` folding: lines join with a space; blank lines and more-indented lines keep breaks."""
    out = ""
    prev_more: bool | None = None
    empties = 0
    for line in body:
        if line == "":
            empties += 1
            continue
        more = line[0] in " \t"
        if prev_more is None:
            out += "\n" * empties + line
        elif not prev_more and not more:
            out += ("\n" * empties if empties else " ") + line
        else:
            out += "\n" * (empties + 1) + line
        prev_more, empties = more, 0
    return out


def loads(text: str) -> Any:
    return _Parser(text).parse()

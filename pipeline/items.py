"""Transcript items as classifiers see them (`Item`): plain, immutable, no validation.

Wire items follow the OpenAI Responses API input item shapes (docs/contract.md section
1); `deltaguard.parsing` validates them and builds their `Item`. Each parsed item gets
one canonical text view, which is what classifiers score, and a digest of what
classifiers see of it (type, role, call id, text), which the conversation store chains
to recognise history it has already scored: a client that resends an output item with
server-assigned ids, or a string content as a list of text parts, resends the same
history.

Every item type is kept as history. Types whose shape DeltaGuard knows get their text
view from their fields; any other type's text is its text fields (never ids or opaque
blobs such as `encrypted_content`), judged as untrusted content. Items with no text at
all (an `item_reference`) are history only: classifiers skip them.

>>> from deltaguard.parsing import parse_item
>>> item = parse_item({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})
>>> item.kind, item.role, item.text
('message', 'user', 'hi')
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# The item types whose shapes DeltaGuard validates; every other type is accepted as is
# (the Responses API adds types regularly) and its text fields are scored.
SCORED_TYPES = frozenset({"message", "function_call", "function_call_output"})
# Items the model itself produces: their text is the model's ("assistant"). Every other
# non-message item (tool outputs of every kind, search and file results, MCP tool lists
# and calls, tool definitions, and types DeltaGuard does not know) is content from
# outside the conversation, judged as untrusted ("tool").
MODEL_ITEM_TYPES = frozenset(
    {
        "function_call",
        "reasoning",
        "custom_tool_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "computer_call",
        "mcp_approval_request",
        "image_generation_call",
        "compaction",
    }
)
# The synthetic item a gateway adds when a request's tool definitions change, so that
# descriptions (a known tool-poisoning channel) are scored once per change. Never
# forwarded to a model.
TOOL_DEFINITIONS = "tool_definitions"
# Items that define tools (the request's, an MCP server's list, a client's extra tools):
# their role is "definitions". Tool descriptions are written as instructions to the
# model ("use this only when the user asks..."), so they are judged by a classifier
# calibrated on tool definitions, not at the threshold for tool outputs.
DEFINITION_TYPES = frozenset({TOOL_DEFINITIONS, "mcp_list_tools", "additional_tools"})
DEFINITIONS_ROLE = "definitions"
# The synthetic item a gateway adds when a request's `instructions` change, so that the
# client's instructions (a system message by another name) are scored once per change:
# `{"type": "instructions", "text": "..."}`, role "instructions". Never forwarded to a model
# (the request's own `instructions` field is).
INSTRUCTIONS = "instructions"
INSTRUCTIONS_ROLE = "instructions"
# Synthetic items that stand for request fields, never forwarded as input items.
SYNTHETIC_TYPES = frozenset({TOOL_DEFINITIONS, INSTRUCTIONS})
TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "refusal"})


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WHITESPACE_RE = re.compile(r"\s")
# A regex call holds the GIL from start to end: a long text is counted a slice at a time,
# so that a thread counting a large request lets the event loop run between slices.
_COUNT_SLICE = 32 * 1024


# ASCII characters as `count_tokens` sees them: "w" (\w), " " (\s) or "p" (a token of its own).
_TOKEN_CLASSES = bytes(
    ord("w") if chr(c).isalnum() or c == ord("_") else ord(" ") if chr(c).isspace() else ord("p")
    for c in range(128)
) + bytes(128)  # (never used: only ASCII text is translated)


def _count_slice(text: str) -> int:
    """`count_tokens` of a slice; ASCII text by byte counts (word runs plus marks), many
    times faster than the pattern."""
    if not text.isascii():
        return len(_TOKEN_RE.findall(text))
    b = text.encode("ascii").translate(_TOKEN_CLASSES)
    return b.count(b"p") + b.count(b" w") + b.count(b"pw") + b.startswith(b"w")


def count_tokens(text: str) -> int:
    """Tokens as DeltaGuard counts work: words and single punctuation marks.

    >>> count_tokens("Don't panic: 42 towels.")
    8
    """
    if len(text) <= _COUNT_SLICE:
        return _count_slice(text)
    count, start = 0, 0
    while start < len(text):
        # Cut at whitespace, which no token spans (a text without any is one slice).
        cut = _WHITESPACE_RE.search(text, start + _COUNT_SLICE)
        end = cut.start() if cut else len(text)
        count += _count_slice(text[start:end])
        start = end
    return count


@dataclass(frozen=True, slots=True)
class Item:
    """One history item as classifiers see it.

    `kind` is the Responses API item type; `role` is the message role, `"assistant"` for
    items the model made (`MODEL_ITEM_TYPES`) and `"tool"` for every other item: content
    from outside the conversation. `text` is the canonical text view.
    `digest` identifies the item as classifiers see it (see the module docstring);
    `tokens` is `count_tokens(text)`, counted once when the item is parsed.
    `attachments` is the text of files attached to a message (`input_file` parts): nobody
    in the conversation wrote it, so it is judged as untrusted content, apart from the
    message's own `text` (a tool output's files are part of its `text`).
    `from_client` is true for an item that came in a request's input rather than from
    the model: an assistant message there is the client's text in the model's mouth (a
    forged turn), judged as the client's words. It is not part of the digest: a client
    that resends the model's own answer resends the same history.
    """

    kind: str
    role: str | None
    text: str
    digest: bytes
    raw: dict[str, Any]
    tokens: int = 0
    scored: bool = True  # false: no text to score (history only)
    from_client: bool = False
    attachments: str = ""

    def to_wire(self) -> dict[str, Any]:
        return self.raw


def sent_items(items: Sequence[Item]) -> list[Item]:
    """The items an upstream is sent: synthetic ones stand for request fields, not items."""
    return [i for i in items if i.kind not in SYNTHETIC_TYPES]


def wire_items(items: Sequence[Item]) -> list[dict[str, Any]]:
    """Items as an upstream is sent them (`sent_items`, in their wire form)."""
    return [i.raw for i in sent_items(items)]


def new_item(
    kind: str, role: str | None, text: str, raw: dict[str, Any], identity: Any = None, **fields: Any
) -> Item:
    """An `Item` with the fields derived once, where it is parsed: `tokens`, and `digest`,
    the hash of `identity` (what classifiers see of the item), else of `raw` itself."""
    digest = hashlib.sha256(canonical_json(identity)).digest() if identity is not None else raw_digest(raw)
    return Item(kind, role, text, digest, raw, count_tokens(text), **fields)


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def raw_digest(obj: dict[str, Any]) -> bytes:
    # Server-assigned fields do not make an item different history, and neither does a
    # field a client echoes back as null (Codex resends reasoning items with
    # `"content": null` added).
    return hashlib.sha256(
        canonical_json({k: v for k, v in obj.items() if k not in ("id", "status") and v is not None})
    ).digest()

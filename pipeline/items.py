"""Transcript items as classifiers see them (`Item`): plain, immutable, no validation.

Wire items follow the OpenAI Responses API input item shapes (docs/contract.md section
1); `deltaguard.parsing` validates them and builds their `Item`. Each parsed item gets
one canonical text view, which is what classifiers score, and a digest of what
classifiers see of it (type, role, call id, text), which the conversation store chains
to recognise history it has already scored: a client that resends an output item with
server-assigned ids, or a string content as a list of text parts, resends the same
history.

Items of types DeltaGuard does not score are kept as history (they take part in the
digest chain) but have no text: classifiers never see them.

>>> from deltaguard.parsing import parse_item
>>> item = parse_item({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})
>>> item.kind, item.role, item.text
('message', 'user', 'hi')
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

# Item types the Responses API defines that DeltaGuard keeps as history without
# scoring them (the gateway rejects types outside SCORED_TYPES | PASSTHROUGH_TYPES).
PASSTHROUGH_TYPES = frozenset(
    {
        "reasoning",
        "item_reference",
        "file_search_call",
        "web_search_call",
        "computer_call",
        "computer_call_output",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "local_shell_call_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "custom_tool_call",
        "custom_tool_call_output",
        "compaction",
    }
)
SCORED_TYPES = frozenset({"message", "function_call", "function_call_output"})
TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text", "refusal"})


_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    """Tokens as DeltaGuard counts work: words and single punctuation marks."""
    return len(_TOKEN_RE.findall(text))


@dataclass(frozen=True, slots=True)
class Item:
    """One history item as classifiers see it.

    `kind` is the Responses API item type; `role` is the message role, `"tool"` for a
    function_call_output and `"assistant"` for a function_call (the model made it);
    `text` is the canonical text view, empty for items that are not scored.
    `digest` identifies the item as classifiers see it (see the module docstring);
    `tokens` is `count_tokens(text)`, counted once when the item is parsed.
    """

    kind: str
    role: str | None
    text: str
    digest: bytes
    raw: dict[str, Any]
    tokens: int = 0

    @property
    def scored(self) -> bool:
        return self.kind in SCORED_TYPES

    def to_wire(self) -> dict[str, Any]:
        return self.raw


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def raw_digest(obj: dict[str, Any]) -> bytes:
    # Server-assigned fields do not make an item different history.
    return hashlib.sha256(
        canonical_json({k: v for k, v in obj.items() if k not in ("id", "status")})
    ).digest()

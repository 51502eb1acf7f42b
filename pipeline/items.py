"""Transcript items: the wire shapes (pydantic) and the hot-path view (`Item`).

Wire items follow the OpenAI Responses API input item shapes (CONTRACT.md section 1).
Each parsed item gets one canonical text view, which is what classifiers score, and a
digest of what classifiers see of it (type, role, call id, text), which the conversation
store chains to recognise history it has already scored: a client that resends an
output item with server-assigned ids, or a string content as a list of text parts,
resends the same history.

Items of types DeltaGuard does not score are kept as history (they take part in the
digest chain) but have no text: classifiers never see them.

>>> item = parse_item({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})
>>> item.kind, item.role, item.text
('message', 'user', 'hi')
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from pipeline.errors import ItemError

Role = Literal["user", "assistant", "system", "developer"]

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


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class ContentPart(_Wire):
    type: str
    text: str | None = None
    refusal: str | None = None


class MessageItem(_Wire):
    type: Literal["message"] = "message"
    role: Role
    content: str | list[ContentPart]


class FunctionCallItem(_Wire):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


class FunctionCallOutputItem(_Wire):
    type: Literal["function_call_output"]
    call_id: str
    output: str | list[ContentPart]


_WIRE_MODELS: dict[str, type[_Wire]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}


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


def _parts_text(parts: list[ContentPart]) -> str:
    texts = []
    for part in parts:
        if part.type in TEXT_PART_TYPES:
            value = part.text if part.text is not None else part.refusal
            if value:
                texts.append(value)
    return "\n".join(texts)


def canonical_json(obj: Any) -> bytes:
    """Deterministic JSON bytes: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8", "surrogatepass"
    )


def _clean_loc(loc: tuple[Any, ...]) -> str:
    # pydantic tags union members in the location ("content.str"): drop the tags.
    parts = [
        str(p) for p in loc if not (isinstance(p, str) and (p in {"str", "int", "float", "bool"} or "[" in p))
    ]
    return ".".join(parts) or "item"


def _first_error_field(exc: ValidationError) -> tuple[str, str]:
    errors = exc.errors()
    # The deepest location is the most specific (a list given for `content` fails in
    # its list branch, not because it is not a string).
    field = max((_clean_loc(e.get("loc", ())) for e in errors), key=lambda f: f.count(".") + 1)
    msgs = dict.fromkeys(
        e.get("msg", "invalid value") for e in errors if _clean_loc(e.get("loc", ())) == field
    )
    return field, " or ".join(msgs)


def parse_item(obj: Any) -> Item:
    """Validate one wire item and build its `Item` view.

    Raises `ItemError` naming the offending field when a known item type has the wrong
    shape. Unknown types are kept (text empty) so transcripts never lose history.
    """
    if not isinstance(obj, dict):
        raise ItemError("item", f"expected a JSON object, got {type(obj).__name__}")
    item_type = obj.get("type", "message")
    if not isinstance(item_type, str):
        raise ItemError("type", f"expected a string, got {type(item_type).__name__}")
    model = _WIRE_MODELS.get(item_type)
    if model is None:
        return Item(kind=item_type, role=None, text="", digest=_digest(obj), raw=obj)
    try:
        wire = model.model_validate(obj)
    except ValidationError as exc:
        field, msg = _first_error_field(exc)
        raise ItemError(field, msg) from None
    if isinstance(wire, MessageItem):
        text = wire.content if isinstance(wire.content, str) else _parts_text(wire.content)
        role: str = wire.role
    elif isinstance(wire, FunctionCallItem):
        text = f"{wire.name}({wire.arguments})"
        role = "assistant"
    else:
        assert isinstance(wire, FunctionCallOutputItem)
        text = wire.output if isinstance(wire.output, str) else _parts_text(wire.output)
        role = "tool"
    call_id = getattr(wire, "call_id", None)
    digest = hashlib.sha256(canonical_json([item_type, role, call_id, text])).digest()
    return Item(kind=item_type, role=role, text=text, digest=digest, raw=obj, tokens=count_tokens(text))


def _digest(obj: dict[str, Any]) -> bytes:
    # Server-assigned fields do not make an item different history.
    return hashlib.sha256(
        canonical_json({k: v for k, v in obj.items() if k not in ("id", "status")})
    ).digest()


def parse_items(objs: Any, field: str = "input") -> list[Item]:
    """Parse a list of wire items; errors name the item index (`input[3].content`)."""
    if not isinstance(objs, list):
        raise ItemError(field, f"expected a list of items, got {type(objs).__name__}")
    items = []
    for i, obj in enumerate(objs):
        try:
            items.append(parse_item(obj))
        except ItemError as exc:
            raise ItemError(f"{field}[{i}].{exc.field}", exc.reason) from None
    return items

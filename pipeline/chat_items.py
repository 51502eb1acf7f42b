"""OpenAI Chat Completions and Responses wire shapes -> DeltaGuard items, canonically.

Gateways that proxy these APIs (LiteLLM) see each turn's whole history, resent by the
client. The conversation store recognises history it has already scored by a hash chain
over item digests, so the same history must always map to the same items, whichever
way the client spelled it:

- a chat message's content as a string or as a list of text parts is the same message
  (text parts are joined with newlines, non-text parts carry no text);
- an assistant turn is its text (one `message` item, present only when it has text or
  no tool calls) followed by one `function_call` item per tool call, in order;
- a `tool` message is a `function_call_output` for its `tool_call_id`.

The model's answer goes through the same functions (`chat_output_items` builds the
assistant message a client would echo back), which is what makes an echoed reply match
what post-call scoring recorded.

Parsing an item counts its tokens and hashes its text, so parsing a resent history is
linear in its length. An `ItemCache` keeps parsed items by their canonical wire form:
with it, a turn parses only the items it has not seen (a history prefix costs one JSON
encoding and one lookup per item).

>>> items = chat_history_items([
...     {"role": "user", "content": [{"type": "text", "text": "hi"}]},
...     {"role": "assistant", "content": None, "tool_calls": [
...         {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
...     {"role": "tool", "tool_call_id": "call_1", "content": "42"},
... ])
>>> [(i.kind, i.role, i.text) for i in items]
[('message', 'user', 'hi'), ('function_call', 'assistant', 'f({})'), ('function_call_output', 'tool', '42')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deltaguard import defaults
from deltaguard.errors import ItemError
from deltaguard.items import Item, canonical_json
from deltaguard.parsing import parse_item
from deltaguard.state.store import LruTtlMap, items_bytes

# Chat content parts whose text the model reads (input images, audio and files carry none).
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_MESSAGE_ROLES = frozenset({"system", "developer", "user", "assistant"})


class ItemCache:
    """Parsed items keyed by their canonical wire form (bounded LRU with a TTL).

    An `Item` is a pure function of its wire form, so a hit is exactly what parsing
    would give. Not thread-safe: use it from one event loop.
    """

    def __init__(
        self, max_entries: int = 100_000, ttl_s: float = 3600.0, max_bytes: int = defaults.ITEM_CACHE_BYTES
    ) -> None:
        # Bounded in bytes as well: distinct large messages would otherwise keep up to
        # `max_entries` of them, each as long as the request limits allow.
        self._items: LruTtlMap[Any, Item] = LruTtlMap(
            max_entries, ttl_s, max_bytes=max_bytes, size=_entry_bytes
        )
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def parse(self, wire: Any) -> Item:
        """`parse_item(wire)`, from the cache when this wire form was parsed before."""
        if not isinstance(wire, Mapping):
            return parse_item(wire)
        values = tuple(wire.values())
        # Flat string-valued items (every chat item) are keyed by their strings, which
        # hash in C; anything else by its canonical JSON.
        key: Any = (tuple(wire), values) if all(type(v) is str for v in values) else canonical_json(wire)
        item = self._items.get(key)
        if item is None:
            self.misses += 1
            item = parse_item(wire)
            self._items.put(key, item)
        else:
            self.hits += 1
        return item


# What an entry costs besides the contents it counts: the map's entry, the `Item` with its
# digest, and the wire form's dict it keeps. Measured with tracemalloc over 2,000-60,000
# chat messages of ~50 characters: 486-509 bytes, so that the bound counted ~40% of what
# a cache of short messages held.
ENTRY_BYTES = 560


def _entry_bytes(key: Any, item: Item) -> int:
    """What an entry holds: its key (the wire form's strings, or its canonical JSON), the
    item (`items_bytes`) and what holding them costs (`ENTRY_BYTES`)."""
    held = len(key) if isinstance(key, bytes) else sum(len(k) + len(v) for k, v in zip(*key, strict=True))
    return held + items_bytes([item]) + ENTRY_BYTES


def _parser(cache: ItemCache | None) -> Callable[[Any], Item]:
    return cache.parse if cache is not None else parse_item


def _content_text(content: Any, field: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ItemError(field, f"expected a string or a list of content parts, got {type(content).__name__}")
    texts = []
    for j, part in enumerate(content):
        if isinstance(part, str):  # some SDKs send bare strings as parts
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise ItemError(f"{field}[{j}]", f"expected a content part object, got {type(part).__name__}")
        kind = part.get("type")
        value = (
            part.get("refusal") if kind == "refusal" else part.get("text") if kind in _TEXT_PARTS else None
        )
        if value is not None and not isinstance(value, str):
            raise ItemError(f"{field}[{j}].text", f"expected a string, got {type(value).__name__}")
        if value:
            texts.append(value)
    return "\n".join(texts)


def _str_field(obj: Mapping[str, Any], key: str, field: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if value is None and default is not None:
        value = default
    if not isinstance(value, str):
        raise ItemError(f"{field}.{key}", f"expected a string, got {type(value).__name__}")
    return value


def chat_message_wire(message: Mapping[str, Any], field: str = "message") -> list[dict[str, Any]]:
    """One chat message as canonical Responses API wire items (see module docstring)."""
    if not isinstance(message, Mapping):
        raise ItemError(field, f"expected a message object, got {type(message).__name__}")
    role = message.get("role")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": _str_field(message, "tool_call_id", field, ""),
                "output": _content_text(message.get("content"), f"{field}.content"),
            }
        ]
    if role == "function":  # the deprecated single-function form: its name is all it has
        return [
            {
                "type": "function_call_output",
                "call_id": _str_field(message, "name", field, ""),
                "output": _content_text(message.get("content"), f"{field}.content"),
            }
        ]
    text = _content_text(message.get("content"), f"{field}.content")
    if role != "assistant":
        # An unknown role still reaches the model: score it as user text rather than skip it.
        return [{"type": "message", "role": role if role in _MESSAGE_ROLES else "user", "content": text}]
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        text = f"{text}\n{refusal}" if text else refusal
    calls: list[dict[str, Any]] = []
    tool_calls = message.get("tool_calls") or []
    if not isinstance(tool_calls, list):
        raise ItemError(f"{field}.tool_calls", f"expected a list, got {type(tool_calls).__name__}")
    for j, call in enumerate(tool_calls):
        where = f"{field}.tool_calls[{j}]"
        if not isinstance(call, Mapping):
            raise ItemError(where, f"expected a tool call object, got {type(call).__name__}")
        fn = call.get("function") or {}
        if not isinstance(fn, Mapping):
            raise ItemError(f"{where}.function", f"expected an object, got {type(fn).__name__}")
        calls.append(
            {
                "type": "function_call",
                "call_id": _str_field(call, "id", where, ""),
                "name": _str_field(fn, "name", f"{where}.function", ""),
                "arguments": _str_field(fn, "arguments", f"{where}.function", ""),
            }
        )
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        name = _str_field(legacy, "name", f"{field}.function_call", "")
        calls.append(
            {
                "type": "function_call",
                "call_id": name,
                "name": name,
                "arguments": _str_field(legacy, "arguments", f"{field}.function_call", ""),
            }
        )
    out: list[dict[str, Any]] = []
    if text or not calls:
        out.append({"type": "message", "role": "assistant", "content": text})
    return out + calls


def chat_history_items(messages: Any, field: str = "messages", cache: ItemCache | None = None) -> list[Item]:
    """A Chat Completions `messages` list as items; errors name the message (`messages[3].content`)."""
    if not isinstance(messages, list):
        raise ItemError(field, f"expected a list of messages, got {type(messages).__name__}")
    parse = _parser(cache)
    items: list[Item] = []
    for i, message in enumerate(messages):
        items.extend(parse(w) for w in chat_message_wire(message, f"{field}[{i}]"))
    return items


def chat_output_items(message: Mapping[str, Any], cache: ItemCache | None = None) -> list[Item]:
    """The items of a model's chat answer (`choices[0].message`), as the client will echo them."""
    return chat_history_items([{**message, "role": "assistant"}], "output", cache)


def responses_history_items(
    input: Any, instructions: Any = None, field: str = "input", cache: ItemCache | None = None
) -> list[Item]:
    """A Responses API `input` (a string or a list of items) as items.

    `instructions`, when given, come first as a system message: they are part of the
    model's prompt on every turn that sends them.
    """
    parse = _parser(cache)
    wire: list[Any] = []
    if isinstance(instructions, str) and instructions:
        wire.append({"type": "message", "role": "system", "content": instructions})
    if isinstance(input, str):
        wire.append({"type": "message", "role": "user", "content": input})
        return [parse(w) for w in wire]
    if not isinstance(input, list):
        raise ItemError(field, f"expected a string or a list of items, got {type(input).__name__}")
    items = [parse(w) for w in wire]
    for i, obj in enumerate(input):
        try:
            items.append(parse(_responses_history_item(obj)))
        except ItemError as exc:
            raise ItemError(f"{field}[{i}].{exc.field}", exc.reason) from None
    return items


def _responses_history_item(obj: Any) -> Any:
    """An input or output item as the store keys it: server-assigned fields dropped."""
    if not isinstance(obj, Mapping):
        return obj
    kind = obj.get("type", "message")
    if kind == "message":
        return {k: v for k, v in obj.items() if k not in ("id", "status")}
    if kind == "function_call":
        return {k: obj[k] for k in ("type", "call_id", "name", "arguments") if k in obj}
    return dict(obj)


def responses_output_items(output: Sequence[Any], cache: ItemCache | None = None) -> list[Item]:
    """The items of a Responses API answer (`response.output`), as the client will echo them."""
    parse = _parser(cache)
    return [parse(_responses_history_item(o)) for o in output]

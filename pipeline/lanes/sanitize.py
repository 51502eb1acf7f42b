"""The `sanitize` action: an injection located in untrusted content is cut out, the turn goes on.

For an agent, losing one paragraph of a fetched page beats losing the whole task. When a
category whose policy action is `sanitize` is flagged and every span that raised it in
the turn lies in untrusted content (a tool output, a file attached to a message), each
span's text is replaced by a marker in the item's wire form, and the sanitised item is
what the upstream model is sent, this turn and every later turn that sends the same item
again (a stateless client resends its whole history; a continuation's history holds it):
`SanitizedItems` remembers the clean form per tenant by the original item's digest
(bounded, least recently used first out). A span the gate did not locate, one in text the
client wrote, or one whose text is not found in the item's wire fields (a file's base64
data) cannot be cut out: the category then blocks, as `block` would.

>>> from deltaguard.classifiers.base import Finding
>>> from deltaguard.parsing import parse_item
>>> page = parse_item({"type": "function_call_output", "call_id": "c", "output": "Hi. EVIL. Bye."})
>>> clean = sanitize_item(page, [Finding("prompt_injection", "lexical", 0, "", 4, 9)])
>>> clean.raw["output"]
'Hi. [removed by DeltaGuard: prompt_injection] Bye.'
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from deltaguard import defaults
from deltaguard.classifiers.base import Finding
from deltaguard.items import Item
from deltaguard.parsing import parse_item
from deltaguard.state.store import LruTtlMap

MARKER = "[removed by DeltaGuard: {category}]"
# Wire fields that name or identify an item: never rewritten.
_KEPT_FIELDS = frozenset({"id", "call_id", "type", "role", "name", "status", "file_id", "file_url"})
ATTACHMENT_SUFFIX = "/attachment"  # a finding kind whose range is in the item's attached files


def is_untrusted(item: Item) -> bool:
    """Content from outside the conversation: a tool's output, or a file attached to a message."""
    return item.role == "tool" or bool(item.attachments)


def _replace(value: Any, old: str, new: str) -> tuple[Any, int]:
    """`value` (a wire item or a part of one) with `old` replaced in its text fields; how many."""
    if isinstance(value, str):
        return value.replace(old, new), value.count(old)
    if isinstance(value, list):
        out = [_replace(v, old, new) for v in value]
        return [v for v, _ in out], sum(n for _, n in out)
    if isinstance(value, dict):
        done = {k: (v, 0) if k in _KEPT_FIELDS else _replace(v, old, new) for k, v in value.items()}
        return {k: v for k, (v, _) in done.items()}, sum(n for _, n in done.values())
    return value, 0


def sanitize_item(item: Item, spans: Sequence[Finding]) -> Item | None:
    """`item` with each located span's text replaced by the marker in its wire form; None
    when a span is not located, not in untrusted content, or not found in the wire form."""
    raw: Any = item.raw
    for span in sorted(spans, key=lambda f: f.start or 0, reverse=True):
        attached = span.kind.endswith(ATTACHMENT_SUFFIX)
        if span.start is None or span.end is None or not (attached or item.role == "tool"):
            return None
        text = (item.attachments if attached else item.text)[span.start : span.end].strip()
        if not text:
            return None
        raw, count = _replace(raw, text, MARKER.format(category=span.category))
        if count == 0:
            return None
    return parse_item(raw, from_client=item.from_client)


class SanitizedItems:
    """(tenant, an item's digest) -> the item as the upstream model is sent it, sanitised."""

    def __init__(self, max_items: int = defaults.MAX_RESPONSES, ttl_s: float = defaults.STATE_TTL_S) -> None:
        self._clean: LruTtlMap[tuple[str, bytes], Item] = LruTtlMap(max_items, ttl_s)
        self._lock = threading.Lock()  # the gate's job writes on a pool thread, turns read on the loop

    def put(self, tenant: str, original: Item, clean: Item) -> None:
        with self._lock:
            self._clean.put((tenant, original.digest), clean)

    def knows_any(self, tenant: str, items: Sequence[Item]) -> bool:
        with self._lock:
            return any((tenant, i.digest) in self._clean for i in items)

    def apply(self, tenant: str, items: Sequence[Item]) -> list[Item]:
        """`items`, each replaced by its sanitised form when it has one."""
        with self._lock:
            if not len(self._clean):
                return list(items)
            return [self._clean.get((tenant, i.digest)) or i for i in items]

    def sanitize(
        self,
        tenant: str,
        scored: Sequence[Item],
        findings: Sequence[Finding],
        categories: Sequence[str],
        history: Sequence[Item],
    ) -> list[str]:
        """Cut out the turn's spans in `categories` (flagged, action `sanitize`) from the
        items it scored (`scored`, which the findings index); remember the clean items.
        Returns the categories that could not be sanitised (they block). A category with
        no span this turn passes when `history` holds an item sanitised before (its
        conversation-level score is that item's); else it blocks."""
        refused = [c for c in categories if not any(f.category == c for f in findings)]
        if refused and self.knows_any(tenant, history):
            refused = []
        by_item: dict[int, dict[tuple[int | None, int | None], Finding]] = {}
        for f in findings:
            if f.category in categories:  # one cut per range, whichever category found it
                by_item.setdefault(f.item_index, {}).setdefault((f.start, f.end), f)
        cleaned: dict[int, Item] = {}
        for index, spans in by_item.items():
            clean = sanitize_item(scored[index], list(spans.values())) if 0 <= index < len(scored) else None
            if clean is None:
                refused += [f.category for f in spans.values()]
            else:
                cleaned[index] = clean
        if refused:
            return sorted(set(refused))
        for index, clean in cleaned.items():
            self.put(tenant, scored[index], clean)
        return []

"""The encoder classifier's bookkeeping per item (classifiers/encoder.py): an item's result,
the items of a request waiting for their windows, and the memo of results by text.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class ItemResult:
    """An item's probabilities per head and its token cost (every view's windows, overlap
    and context included). Where some head is over its threshold, per head, among the
    windows that read the item's text as it is (not another view of it), the one that scored
    highest: the characters [start, end) it read and its probability (None: not locatable)."""

    scores: tuple[float, ...]
    tokens: int
    located: tuple[tuple[int, int, float] | None, ...] = ()


@dataclass(frozen=True, slots=True)
class Pending:
    """A scored item whose windows are [lo, hi) of the batch's windows."""

    lo: int
    hi: int
    key: bytes
    role: str
    own: int = 0  # windows [lo, lo + own) read `text` as it is (locatable)
    text: str = ""


class ItemMemo:
    """Bounded, thread-safe LRU of item results keyed by (context, text).

    The same system prompt, tool schema or fetched page recurs across conversations;
    scoring it once is exact (scores depend on the text and context only).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[bytes, ItemResult] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str, context: Sequence[int]) -> bytes:
        h = hashlib.blake2b(digest_size=20)
        h.update(np.asarray(context, dtype=np.int64).tobytes())
        h.update(b"\x00")
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def get(self, key: bytes) -> ItemResult | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: bytes, result: ItemResult) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = result
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


@dataclass(slots=True)
class Plan:
    """One request's items: zero (None), already scored, or waiting for their windows."""

    entries: list[tuple[ItemResult, str] | Pending | None]
    context: list[int]  # the state's context after the request
    # Files attached to messages: (index of the item, its files' result), judged as tool output.
    attached: list[tuple[int, tuple[ItemResult, str] | Pending]] = field(default_factory=list)

"""One kind of conversation state in two tiers: the process's own, and a backend's.

    records = StateMap("gate/acme/responses", max_entries=1000, max_bytes=64 << 20,
                       ttl_s=3600, encode=json.dumps, decode=json.loads)
    records.put("resp_1", {"items": []})
    records.get("resp_1")      # {'items': []}

The in-process tier is a `cachetools.TTLCache` bounded in bytes (each entry's `size`, by
default the length of its JSON form, plus its key's and what the tier spends to hold it,
`ENTRY_BYTES`) and in entries, least recently used evicted first,
entries expiring `ttl_s` after their last use. With a backend (`deltaguard.state.backends`)
every write goes through to it as JSON, and what the process no longer holds is read back
from it; the process then keeps only what was used in the last `cache_ttl_s`, so an idle
conversation costs it nothing. `fresh` maps (mutable values on a shared backend: the
lock-out, the Conversations API's entries) always read the backend, since another
replica may have written them. `encoded` maps keep their values in the process as
their JSON text: the collector walks one string instead of the value's dicts and lists,
and the bound in bytes is what the process really holds. The last RECENT values written
or read stay decoded too, so a conversation's next turn, which reads what its last one
wrote, decodes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import cachetools

from deltaguard.state.backends import StateBackend

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

RECENT = 256  # decoded values an `encoded` map keeps beside their text
# What the process spends on an entry besides its key's and value's contents: the key's
# and the value's object headers, the tier's link, pair and size, and its three tables'
# slots. Measured with tracemalloc over 1,000-45,000 entries of a 32-byte key and a
# 29-character id: 352-487 bytes, by where the tables stand in their growth. A map of
# small entries (a conversation index) otherwise holds four times what it counts.
ENTRY_BYTES = 512


def entry_bytes(key: Any, size: int) -> int:
    """What an entry of `size` (its value's contents) under `key` costs the process."""
    if isinstance(key, (bytes, str)):
        return size + len(key) + ENTRY_BYTES
    if isinstance(key, tuple):
        return size + sum(len(k) if isinstance(k, (bytes, str)) else 8 for k in key) + ENTRY_BYTES
    return size + ENTRY_BYTES


def key_text(key: Any) -> str:
    """A backend key for a map key: bytes as hex, tuples joined with '/'."""
    if isinstance(key, bytes):
        return key.hex()
    if isinstance(key, tuple):
        return "/".join(key_text(k) for k in key)
    return str(key)


class _Tier(cachetools.TTLCache):  # type: ignore[type-arg]
    """TTLCache of (size, value) pairs, bounded in bytes and entries, counting what leaves."""

    def __init__(self, max_entries: int, max_bytes: int, ttl_s: float, timer: Callable[[], float]) -> None:
        super().__init__(max_bytes, ttl_s, timer=timer, getsizeof=lambda entry: entry[0])
        self.max_entries = max_entries
        self.evictions = 0
        self.expirations = 0

    def popitem(self) -> Any:
        self.evictions += 1
        return super().popitem()

    def expire(self, time: float | None = None) -> Any:
        held = cachetools.Cache.__len__(self)  # len(self) would expire first
        expired = super().expire(time)
        self.expirations += held - cachetools.Cache.__len__(self)
        return expired

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self.max_entries:
            self.popitem()


class StateMap(Generic[K, V]):
    """A bounded map of one kind of state, over an optional backend (module docstring).

    Thread-safe: one lock around the in-process tier."""

    def __init__(
        self,
        namespace: str,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        encode: Callable[[V], str],
        decode: Callable[[str], V],
        size: Callable[[V], int] | None = None,
        group: Callable[[V], str | None] | None = None,
        backend: StateBackend | None = None,
        cache_ttl_s: float | None = None,
        fresh: bool = False,
        encoded: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.namespace = namespace
        self.ttl_s = ttl_s
        self.backend = backend
        self.fresh = fresh and backend is not None and backend.shared
        self.encoded = encoded
        # Encoded maps: the hot values, decoded. An entry the tier has dropped may linger
        # here; reads look in the tier first, so it is never served.
        self._recent: cachetools.LRUCache[K, V] = cachetools.LRUCache(RECENT)
        self._encode, self._decode, self._size, self._group = encode, decode, size, group
        tier_ttl = min(ttl_s, cache_ttl_s) if backend is not None and cache_ttl_s else ttl_s
        self._tier = _Tier(max_entries, max_bytes, tier_ttl, clock)
        self._lock = threading.RLock()
        self._peak = 0  # most entries held since the tier's tables were last rebuilt
        self._writes = 0

    @property
    def evictions(self) -> int:
        return self._tier.evictions

    @property
    def expirations(self) -> int:
        return self._tier.expirations

    @property
    def nbytes(self) -> int:
        """Bytes held in the process (as the entries' sizes count them)."""
        return int(self._tier.currsize)

    def __len__(self) -> int:
        with self._lock:
            self._tier.expire()
            self._compact()
            return len(self._tier)

    def _compact(self) -> None:
        """Rebuild the tier's tables once they hold a quarter of their peak: a dict keeps
        its size after deletions, and idle conversations should cost nothing."""
        held = len(self._tier)
        self._peak = max(self._peak, held)
        if self._peak < 256 or held * 4 > self._peak:
            return
        old = self._tier
        new = _Tier(old.max_entries, int(old.maxsize), old.ttl, old.timer)
        new.evictions, new.expirations = old.evictions, old.expirations
        for key in list(old.keys()):  # oldest first: the order of use is kept
            entry = old.get(key)
            if entry is not None:
                new[key] = entry
        self._tier, self._peak = new, len(new)

    def __contains__(self, key: K) -> bool:
        return self.get(key) is not None

    def _key(self, key: K) -> str:
        return f"{self.namespace}/{key_text(key)}"

    def _keep(self, key: K, size: int, value: V, text: str | None = None) -> None:
        """Hold the value (or, in an `encoded` map, its text) in the process; `size`
        counts its contents."""
        held: Any = value
        if self.encoded:
            held = text if text is not None else self._encode(value)
        with self._lock:
            try:
                self._tier[key] = (entry_bytes(key, size), held)  # (re)inserted: most recent, expiry renewed
            except ValueError:  # larger than the whole tier: only the backend keeps it
                self._tier.pop(key, None)
                self._recent.pop(key, None)
                self._tier.evictions += 1
            else:
                if self.encoded:
                    self._recent[key] = value
            self._peak = max(self._peak, len(self._tier))
            self._writes += 1
            if self._writes % 4096 == 0:
                self._compact()

    def cached(self, key: K) -> V | None:
        """The value if the process holds it (never the backend)."""
        with self._lock:
            entry = self._tier.get(key)
            if entry is None:
                return None
            self._tier[key] = entry
            if not self.encoded:
                return entry[1]  # type: ignore[no-any-return]
            value = self._recent.get(key)  # a hit is the most recent again
            if value is not None:
                return value
        value = self._decode(entry[1])
        with self._lock:
            if self._tier.get(key) is entry:  # not rewritten meanwhile
                self._recent[key] = value
        return value

    def get(self, key: K, *, fresh: bool | None = None) -> V | None:
        """The value, from the process or else the backend; `fresh`: the backend first."""
        if not (self.fresh if fresh is None else fresh and self.backend is not None):
            value = self.cached(key)
            if value is not None or self.backend is None:
                return value
        assert self.backend is not None
        text = self.backend.get(self._key(key))
        if text is None:
            with self._lock:
                self._tier.pop(key, None)
            return None
        value = self._decode(text)
        self._keep(key, self._size(value) if self._size else len(text), value, text)
        return value

    def put(self, key: K, value: V) -> None:
        text = None
        if self.backend is not None:
            text = self._encode(value)
            group = self._group(value) if self._group else None
            self.backend.put(self._key(key), text, self.ttl_s, group=group)
        if text is None and (self._size is None or self.encoded):
            text = self._encode(value)
        size = self._size(value) if self._size is not None else len(text or "")
        self._keep(key, size, value, text)

    def update(self, key: K, change: Callable[[V | None], V]) -> V:
        """Atomically, in the backend when there is one: the value (None when absent)
        through `change`, kept and returned (read-modify-write that replicas share)."""
        if self.backend is None:
            with self._lock:
                value = change(self.cached(key))
                self.put(key, value)
                return value

        def encoded(old: str | None) -> str:
            return self._encode(change(None if old is None else self._decode(old)))

        text = self.backend.update(self._key(key), encoded, self.ttl_s)
        value = self._decode(text)
        self._keep(key, self._size(value) if self._size else len(text), value, text)
        return value

    def discard(self, key: K) -> None:
        """Forget the key here and in the backend."""
        with self._lock:
            self._tier.pop(key, None)
            self._recent.pop(key, None)
        if self.backend is not None:
            self.backend.delete(self._key(key))

    def clear(self) -> None:
        """Empty the process's tier (what a backend holds stays)."""
        with self._lock:
            self._tier.clear()
            self._recent.clear()

"""The bounded maps the conversation store keeps its records and snapshots in."""

from __future__ import annotations

import pytest

from deltaguard.state.store import LruTtlMap
from tests.support.toy import ManualClock


def test_lru_ttl_map_evicts_oldest_and_expires():
    clock = ManualClock()
    m = LruTtlMap(2, ttl_s=10, clock=clock)
    m.put("a", 1)
    m.put("b", 2)
    assert m.get("a") == 1  # a is now most recent
    m.put("c", 3)
    assert m.get("b") is None and m.evictions == 1
    clock.now = 11
    assert m.get("a") is None and m.expirations == 1


def test_lru_ttl_map_bounded_in_bytes_counts_what_leaves_and_what_is_replaced():
    clock = ManualClock()
    m = LruTtlMap(100, ttl_s=10, clock=clock, max_bytes=10, size=lambda key, value: len(value))
    m.put("a", "xxxx")
    m.put("b", "xxxx")
    m.put("a", "xx")  # replaced: its old size leaves with it
    assert m.bytes == 6 and len(m) == 2
    m.put("c", "xxxxxx")  # 12 > 10: the least recent (b) goes
    assert m.get("b") is None and m.bytes == 8 and m.evictions == 1
    m.put("d", "x" * 11)  # larger than the bound alone: kept by nothing
    assert m.get("d") is None and m.bytes == 0 and len(m) == 0
    m.put("e", "xxx")
    clock.now = 11
    assert m.get("e") is None and m.bytes == 0 and m.expirations == 1
    with pytest.raises(ValueError, match="together"):
        LruTtlMap(1, ttl_s=1, max_bytes=10)

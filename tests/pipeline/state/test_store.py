"""The bounded maps the conversation store keeps its records and snapshots in."""

from __future__ import annotations

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

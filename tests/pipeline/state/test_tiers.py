"""The process tier: bounded in bytes and entries, least recently used first, idle
entries dropped when a backend keeps them; its tables shrink after the peak."""

from __future__ import annotations

from deltaguard.state.backends import SqliteBackend
from deltaguard.state.tiers import StateMap


def test_the_process_tier_is_bounded_in_bytes():
    m = StateMap("t", max_entries=100, max_bytes=1000, ttl_s=60, encode=str, decode=str)
    for i in range(10):
        m.put(i, "x" * 300)
    assert m.nbytes <= 1000 and len(m) == 3 and m.evictions == 7
    assert m.get(9) == "x" * 300 and m.get(0) is None


def test_the_process_tier_keeps_recently_used_and_drops_idle_with_a_backend(tmp_path):
    now = [0.0]
    backend = SqliteBackend(tmp_path / "s.db")
    m = StateMap(
        "t",
        max_entries=10,
        max_bytes=10_000,
        ttl_s=3600,
        encode=str,
        decode=str,
        backend=backend,
        cache_ttl_s=60,
        clock=lambda: now[0],
    )
    m.put("a", "1")
    now[0] = 61
    assert m.cached("a") is None and m.get("a") == "1"  # gone from memory, read back


def test_the_tables_are_rebuilt_once_most_entries_are_gone():
    now = [0.0]
    m = StateMap(
        "t", max_entries=10_000, max_bytes=10**9, ttl_s=10, encode=str, decode=str, clock=lambda: now[0]
    )
    for i in range(2000):
        m.put(i, "v")
    now[0] = 5
    m.put("fresh", "v")
    now[0] = 11  # all but "fresh" expired
    assert len(m) == 1 and m.get("fresh") == "v" and m.expirations == 2000
    assert m._peak == 1  # the tables were rebuilt at their new size

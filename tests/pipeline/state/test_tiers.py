"""The process tier: bounded in bytes and entries, least recently used first, idle
entries dropped when a backend keeps them; its tables shrink after the peak."""

from __future__ import annotations

import hashlib
import json
import tracemalloc

import pytest

from deltaguard.state.backends import SqliteBackend
from deltaguard.state.tiers import ENTRY_BYTES, StateMap, entry_bytes


def test_the_process_tier_is_bounded_in_bytes():
    entry = 300 + ENTRY_BYTES
    m = StateMap("t", max_entries=100, max_bytes=3 * entry + 10, ttl_s=60, encode=str, decode=str)
    for i in range(10):
        m.put(i, "x" * 300)
    assert m.nbytes == 3 * entry and len(m) == 3 and m.evictions == 7
    assert m.get(9) == "x" * 300 and m.get(0) is None


@pytest.mark.parametrize("n", [1_000, 6_000, 45_000])
def test_what_an_index_counts_bounds_what_the_process_holds(n):
    # A conversation index: a 32-byte chain value to a response id, small entries whose
    # holding costs more than their contents. Counted as contents alone, 100,000 of them
    # held ~45 MB against a bound of 12.
    tracemalloc.start()
    try:
        m = StateMap("t", max_entries=10**6, max_bytes=10**12, ttl_s=60, encode=str, decode=str, size=len)
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            m.put(hashlib.sha256(str(i).encode()).digest(), f"resp_{i:024x}")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert 0.6 * m.nbytes <= held <= m.nbytes


def test_an_entry_counts_its_key():
    assert entry_bytes(b"k" * 32, 10) == entry_bytes("k" * 32, 10) == 42 + ENTRY_BYTES
    assert entry_bytes(("a", "bc"), 0) == 3 + ENTRY_BYTES and entry_bytes(7, 5) == 5 + ENTRY_BYTES


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


def test_an_encoded_map_holds_text_and_gives_back_equal_values(tmp_path):
    import gc

    value = {"states": {"lexical": [0.5, 0.25]}, "scores": {"jailbreak": 0.125}}
    text = json.dumps(value, separators=(",", ":"))
    for backend in (None, SqliteBackend(tmp_path / "s.db")):
        m = StateMap(
            "t",
            max_entries=10,
            max_bytes=10_000,
            ttl_s=60,
            encode=lambda v: json.dumps(v, separators=(",", ":")),
            decode=json.loads,
            encoded=True,
            backend=backend,
        )
        m.put("a", value)
        size, held = m._tier["a"]
        # What the process holds is the text: nothing for the collector to walk, and the
        # bound in bytes counts what is there.
        assert held == text and not gc.is_tracked(held) and size == entry_bytes("a", len(text)) == m.nbytes
        assert m.get("a") is value  # among the recent values: nothing decoded
        m.update("a", lambda old: {**old, "n": 1})
        assert m.cached("a") == {**value, "n": 1} and isinstance(m._tier["a"][1], str)


def test_an_encoded_map_decodes_what_fell_out_of_its_recent_values():
    from deltaguard.state import tiers

    m = StateMap(
        "t", max_entries=1000, max_bytes=10**6, ttl_s=60, encode=json.dumps, decode=json.loads, encoded=True
    )
    first = {"n": [0]}
    m.put(0, first)
    for i in range(1, tiers.RECENT + 1):
        m.put(i, {"n": [i]})
    got = m.get(0)
    assert got == first and got is not first  # decoded from its text
    assert m.get(0) is got  # and recent again
    m.discard(0)
    assert m.get(0) is None


def test_an_encoded_map_keeps_no_value_too_large_for_its_bound():
    m = StateMap(
        "t", max_entries=10, max_bytes=100, ttl_s=60, encode=json.dumps, decode=json.loads, encoded=True
    )
    m.put("big", {"x": "y" * 200})
    assert m.get("big") is None and "big" not in m._recent and m.evictions == 1

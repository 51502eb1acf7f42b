"""What `deltaguard serve` does to its process: the heap it loaded leaves the garbage
collector's generations, glibc's arenas are bounded, a thread may hold the GIL only
briefly while the event loop waits for it, and what C buffers freed goes back to the OS."""

from __future__ import annotations

import gc
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from deltaguard import defaults
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.process import (
    fix_mmap_threshold,
    limit_malloc_arenas,
    prepare_heap,
    shorten_gil_turns,
    start_heap_trimming,
)
from tests.support.serve import served


def test_the_loaded_classifiers_leave_the_collectors_generations(scorer):
    models = [c for c in scorer.classifiers if gc.is_tracked(c)]
    assert models
    thresholds = gc.get_threshold()
    try:
        frozen = prepare_heap()
        assert frozen >= len(models) and gc.get_threshold() == defaults.GC_THRESHOLDS
        tracked = {id(o) for o in gc.get_objects()}  # what a full collection walks
        assert not any(id(c) in tracked for c in models)
    finally:
        gc.unfreeze()  # the test process goes on collecting as before
        gc.set_threshold(*thresholds)
    assert any(id(c) in {id(o) for o in gc.get_objects()} for c in models)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_ARENA_MAX is glibc's")
def test_malloc_arenas_are_limited_unless_the_operator_set_them(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert limit_malloc_arenas(8) is True  # generous: this test process allocates as before
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas(2) is False


def test_serving_shortens_the_gils_turns_and_an_operator_may_choose_them():
    assert GatewayConfig().gil_switch_s == defaults.GIL_SWITCH_S < sys.getswitchinterval()
    with pytest.raises(ValueError, match="gil_switch_s"):
        GatewayConfig(gil_switch_s=0)
    before = sys.getswitchinterval()
    try:
        assert shorten_gil_turns(GatewayConfig(gil_switch_s=0.002).gil_switch_s) == before
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        sys.setswitchinterval(before)


# Run in a fresh interpreter: what it frees and trims is its own heap, not the test runner's.
_FREED_THEN_TRIMMED = """
import os
from deltaguard.gateway.process import trim_heap

def rss_mb():
    return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * 4096 / 2**20

blocks = [bytes(100_000) + bytes([i % 256]) for i in range(2_000)]  # 200 MB under the mmap threshold
pin = bytes(100_000) + b"!"  # above them: the top of the heap stays in use, glibc cannot shrink it
del blocks
held = rss_mb()
released = trim_heap()
print(held, rss_mb(), released)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trimming_hands_back_what_was_freed_inside_the_heap():
    run = [sys.executable, "-c", _FREED_THEN_TRIMMED]
    out = subprocess.run(run, capture_output=True, text=True, check=True)
    held, after, released = out.stdout.split()
    assert float(held) - float(after) > 150, out.stdout  # of the 200 MB freed, glibc had kept most
    assert released == "True"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_heap_trimming_runs_until_stopped_and_can_be_turned_off():
    assert start_heap_trimming(0) is None
    stop = start_heap_trimming(0.01)
    try:
        assert stop is not None
        assert any(t.name == "heap-trim" and t.daemon for t in threading.enumerate())
    finally:
        stop.set()
    deadline = time.monotonic() + 5
    while any(t.name == "heap-trim" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.name == "heap-trim" for t in threading.enumerate())


# A fresh interpreter: a large block freed raises glibc's threshold, and blocks under it
# then come from the heap, where small blocks allocated between them keep them in.
_LARGE_BLOCKS_FREED = """
import os, sys
from deltaguard.gateway.process import fix_mmap_threshold

def rss_mb():
    return int(open(f"/proc/{os.getpid()}/statm").read().split()[1]) * 4096 / 2**20

fixed = fix_mmap_threshold() if sys.argv[1] == "fixed" else None
big = bytes(16 << 20) + b"!"
del big
before = rss_mb()
blocks, kept = [], []
for i in range(300):
    blocks.append(os.urandom(300_000))  # 90 MB: a large request's buffers
    kept.append(os.urandom(1000))  # and what the stores keep meanwhile
del blocks
print(rss_mb() - before, fixed)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="M_MMAP_THRESHOLD is glibc's")
def test_a_fixed_mmap_threshold_hands_large_blocks_back_as_they_are_freed(monkeypatch):
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    held = {}
    for mode in ("glibc", "fixed"):
        run = [sys.executable, "-c", _LARGE_BLOCKS_FREED, mode]
        out = subprocess.run(run, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        held[mode], result = out.stdout.split()
    assert float(held["glibc"]) > 15 and result == "True", held  # glibc's own threshold keeps ~22 MB
    assert float(held["fixed"]) < 5, held
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    assert fix_mmap_threshold() is False  # the operator's is left to glibc


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_serve_runs_on_uvloop_and_answers():
    with served([]) as gw:
        r = httpx.post(gw.base + "/v1/responses", json={"model": "sim", "input": "hello"}, timeout=30)
        assert r.status_code == 200 and r.json()["status"] == "completed"
        assert "/uvloop/" in Path(f"/proc/{gw.proc.pid}/maps").read_text()  # its C loop is loaded

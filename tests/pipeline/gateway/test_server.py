"""What `deltaguard serve` does to the process before it serves: the heap it loaded
leaves the garbage collector's generations, glibc's arenas are bounded, and a thread may
hold the GIL only briefly while the event loop waits for it."""

from __future__ import annotations

import gc
import platform
import sys

import pytest

from deltaguard import defaults
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import limit_malloc_arenas, prepare_heap, shorten_gil_turns


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

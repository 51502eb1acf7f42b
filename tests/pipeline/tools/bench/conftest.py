"""A tiny benchmark run, measured once for the module's tests."""

from __future__ import annotations

import pytest

from deltaguard.tools.bench.measure import run_bench
from deltaguard.tools.bench.samples import BenchConfig


@pytest.fixture(scope="module")
def tiny(scorer):
    config = BenchConfig(turns=6, tool_tokens=40, conversations=2, full_every=2, warmup_turns=2)
    return run_bench(config, scorer)

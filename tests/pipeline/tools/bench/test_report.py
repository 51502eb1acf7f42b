"""The benchmark's report: its JSON keys, the files it writes.

Latency figures themselves are benchmarks (eval/), not timed tests: only the shape of
the report and the bookkeeping behind it are checked here.
"""

from __future__ import annotations

import json

from deltaguard.classifiers.registry import DEFAULT_NAMES
from deltaguard.tools.bench.report import write_outputs
from deltaguard.tools.bench.samples import PIPELINE, TOTAL


def test_the_report_has_the_expected_keys(tiny, tmp_path):
    data = tiny.to_json()
    assert set(data) >= {"config", "environment", "classifiers", "summary", "per_classifier", "turns"}
    names = list(data["classifiers"])
    assert names == list(DEFAULT_NAMES)
    s = data["summary"]
    for key in (
        "full_over_delta_at_turn",
        "delta_flatness_last20_over_10_29",
        "pipeline_over_floor",
        "pipeline_overhead_ms_p50",
        "delta_tokens_per_turn",
        "full_tokens_at_turn",
        "verdict_mismatches",
    ):
        assert key in s
    assert s["verdict_mismatches"] == [] and s["conversations"] == 2 and s["turns"] == 6
    assert s["delta_flatness_last20_over_10_29"] is None  # needs 50 turns
    for name in [*names, TOTAL, PIPELINE]:
        row = data["per_classifier"][name]
        for mode in ("delta_ms", "full_ms") + (("floor_ms",) if name != PIPELINE else ()):
            assert set(row[mode]) == {"p50", "p95", "p99"}
            assert 0.0 <= row[mode]["p50"] <= row[mode]["p95"] <= row[mode]["p99"]
    turns = data["turns"]
    assert [t["index"] for t in turns] == list(range(6))
    # Full mode every 2nd turn, and at the last one.
    assert [t["full"] is not None for t in turns] == [True, False, True, False, True, True]
    for t in turns:
        assert t["samples"] == 2
        assert set(t["delta"]["latency_ms"]) == {*names, TOTAL, PIPELINE}
        assert set(t["floor"]["latency_ms"]) == {*names, TOTAL}

    paths = write_outputs(data, tmp_path / "bench")
    for name in ("bench.json", "bench.md", "bench.png", "latency_per_classifier.png", "delta_breakdown.png"):
        assert (tmp_path / "bench" / name).stat().st_size > 0
    assert json.loads(paths["json"].read_text())["summary"] == s
    assert "| secrets |" in paths["markdown"].read_text()

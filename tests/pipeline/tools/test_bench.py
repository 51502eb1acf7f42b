"""`deltaguard bench` on tiny rollouts: what it measures and what it writes.

Latency figures themselves are benchmarks (eval/), not timed tests: only the shape of
the report and the bookkeeping behind it are checked here.
"""

from __future__ import annotations

import json

import pytest

from deltaguard.classifiers.registry import DEFAULT_NAMES
from deltaguard.cli import main
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationTracker
from deltaguard.tools.bench import (
    PIPELINE,
    TOTAL,
    BenchConfig,
    TimedClassifier,
    bench_conversation,
    run_bench,
    timed_scorer,
    write_outputs,
)
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import parse_conversation
from tests.support.toy import ItemCounter

SAMPLE = "eval/samples/demo.jsonl"


@pytest.fixture(scope="module")
def tiny(scorer):
    config = BenchConfig(turns=6, tool_tokens=40, conversations=2, full_every=2, warmup_turns=2)
    return run_bench(config, scorer)


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


def test_delta_scores_only_the_new_items_and_full_the_history(tiny):
    by_turn = {}
    for sample in tiny.samples:
        by_turn.setdefault(sample.index, []).append(sample)
    for index, samples in by_turn.items():
        for s in samples:
            # The rule classifiers add at most their 512-character window to the new items.
            assert s.delta_tokens["lexical"] <= s.new_tokens
            assert s.delta_tokens["secrets"] >= s.new_tokens
            if s.full_tokens is not None and index > 1:
                assert s.full_tokens["secrets"] > s.delta_tokens["secrets"]


def test_the_floor_runs_each_classifier_on_exactly_the_new_items():
    counter = ItemCounter()
    scorer = timed_scorer(Scorer([counter]), clock=lambda: 0.0)
    conv = parse_conversation(agent_rollout("c", 5, 20), "<t>", 0)
    samples = bench_conversation(conv, scorer, ConversationTracker(scorer), stride=10**6)
    assert [s.full_ms is not None for s in samples] == [True, False, False, False, True]
    items = [len(t.input) for t in conv.turns]
    outputs = [len(t.output) for t in conv.turns]
    # delta input + floor input, delta output + floor output, and the two full refolds
    full = sum(items) + sum(outputs[:4]) + items[0]
    assert counter.items_seen == 2 * sum(items) + 2 * sum(outputs) + full
    assert isinstance(scorer.classifiers[0], TimedClassifier)


def test_the_cli_writes_its_files_and_the_figure(tmp_path, capsys):
    out = tmp_path / "out"
    figure = tmp_path / "figures" / "bench_delta.png"
    argv = ["bench", "--turns", "4", "--tool-tokens", "30", "--out", str(out), "--figure", str(figure)]
    assert main([*argv, "--no-progress", "--clock", "cpu"]) == 0
    assert figure.stat().st_size > 0 and (out / "bench.json").is_file()
    assert json.loads((out / "bench.json").read_text())["config"]["clock"] == "cpu"
    assert "full_over_delta_at_turn" in capsys.readouterr().out


def test_the_cli_measures_a_transcript_file(tmp_path):
    out = tmp_path / "out"
    assert main(["bench", "--transcript", SAMPLE, "--out", str(out), "--no-plots", "--no-progress"]) == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["summary"]["conversations"] == 5 and data["summary"]["verdict_mismatches"] == []
    assert not (out / "bench.png").exists()
    assert main(["bench", "--transcript", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2

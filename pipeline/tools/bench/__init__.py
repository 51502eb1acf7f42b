"""Per-turn safety cost, delta against full rescoring (`deltaguard bench`).

    from deltaguard.tools.bench import BenchConfig, run_bench, write_outputs
    result = run_bench(BenchConfig(turns=20, tool_tokens=200))
    write_outputs(result.to_json(), Path("eval/out/bench"))

Modules, in the order a run uses them:

    samples   BenchConfig, TurnSample: what is measured
    measure   the three ways a turn is measured (delta, full, floor), on one clock
    result    BenchResult and its JSON report
    summary   percentiles per turn and per classifier, the headline figures
    plots     the PNG plots
    report    bench.json, bench.md and the plots written to a folder
    command   the `deltaguard bench` command
"""

from __future__ import annotations

from deltaguard.tools.bench.command import add_bench_parser, cmd_bench
from deltaguard.tools.bench.measure import (
    CLOCKS,
    Clock,
    TimedClassifier,
    bench_conversation,
    floor_update,
    load_conversations,
    rollouts,
    run_bench,
    timed_scorer,
)
from deltaguard.tools.bench.plots import plot_all
from deltaguard.tools.bench.report import copy_figure, markdown, write_outputs
from deltaguard.tools.bench.result import BenchResult
from deltaguard.tools.bench.samples import (
    FULL_EVERY_TURNS,
    PERCENTILES,
    PIPELINE,
    TOTAL,
    BenchConfig,
    TurnSample,
)
from deltaguard.tools.bench.summary import (
    SUMMARY_DOC,
    environment,
    per_classifier,
    per_turn,
    percentiles,
    summarize,
)

__all__ = [
    "CLOCKS",
    "FULL_EVERY_TURNS",
    "PERCENTILES",
    "PIPELINE",
    "SUMMARY_DOC",
    "TOTAL",
    "BenchConfig",
    "BenchResult",
    "Clock",
    "TimedClassifier",
    "TurnSample",
    "add_bench_parser",
    "bench_conversation",
    "cmd_bench",
    "copy_figure",
    "environment",
    "floor_update",
    "load_conversations",
    "markdown",
    "per_classifier",
    "per_turn",
    "percentiles",
    "plot_all",
    "rollouts",
    "run_bench",
    "summarize",
    "timed_scorer",
    "write_outputs",
]

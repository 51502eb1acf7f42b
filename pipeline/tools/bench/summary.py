"""The benchmark's aggregation: percentiles per turn and per classifier, the headline figures."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from deltaguard.tools.bench.samples import PERCENTILES, PIPELINE, TOTAL, TurnSample

if TYPE_CHECKING:
    from deltaguard.tools.bench.result import BenchResult


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 (linear interpolation), rounded to 4 decimals."""
    if not values:
        return {f"p{p}": 0.0 for p in PERCENTILES}
    got = np.percentile(np.asarray(values, dtype=np.float64), PERCENTILES)
    return {f"p{p}": round(float(v), 4) for p, v in zip(PERCENTILES, got, strict=True)}


def _median_int(values: Sequence[int]) -> int:
    return round(statistics.median(values)) if values else 0


def _tokens(rows: Sequence[dict[str, int]], names: Sequence[str]) -> dict[str, int]:
    out = {n: _median_int([r.get(n, 0) for r in rows]) for n in names}
    # As docs/contract.md's tokens_scored: what the busiest classifier processed.
    out["tokens_scored"] = _median_int([max(r.values(), default=0) for r in rows])
    return out


def per_turn(samples: Sequence[TurnSample], names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per turn index, aggregated over conversations (percentiles over them)."""
    by_index: dict[int, list[TurnSample]] = {}
    for s in samples:
        by_index.setdefault(s.index, []).append(s)
    rows = []
    keys = [*names, TOTAL, PIPELINE]
    for index in sorted(by_index):
        group = by_index[index]
        fulls = [s for s in group if s.full_ms is not None]
        row: dict[str, Any] = {
            "index": index,
            "samples": len(group),
            "new_tokens": _median_int([s.new_tokens for s in group]),
            "delta": {
                "latency_ms": {k: percentiles([s.delta_ms[k] for s in group]) for k in keys},
                "tokens": _tokens([s.delta_tokens for s in group], names),
                "output_ms": percentiles([s.output_ms for s in group]),
            },
            "floor": {
                "latency_ms": {k: percentiles([s.floor_ms[k] for s in group]) for k in [*names, TOTAL]}
            },
            "full": None,
        }
        if fulls:
            row["full"] = {
                "samples": len(fulls),
                "latency_ms": {k: percentiles([s.full_ms[k] for s in fulls if s.full_ms]) for k in keys},
                "tokens": _tokens([s.full_tokens for s in fulls if s.full_tokens], names),
                "verdict_mismatches": sum(s.mismatch for s in fulls),
            }
        rows.append(row)
    return rows


def per_classifier(samples: Sequence[TurnSample], names: Sequence[str]) -> dict[str, Any]:
    """Percentiles over every measured turn, per classifier, TOTAL and PIPELINE."""
    fulls = [s for s in samples if s.full_ms is not None]
    out: dict[str, Any] = {}
    for k in [*names, TOTAL, PIPELINE]:
        row: dict[str, Any] = {
            "delta_ms": percentiles([s.delta_ms[k] for s in samples]),
            "full_ms": percentiles([s.full_ms[k] for s in fulls if s.full_ms]),
        }
        if k != PIPELINE:
            row["floor_ms"] = percentiles([s.floor_ms[k] for s in samples])
        if k in names:
            row["delta_tokens"] = percentiles([s.delta_tokens.get(k, 0) for s in samples])
            row["full_tokens"] = percentiles([s.full_tokens.get(k, 0) for s in fulls if s.full_tokens])
            row["pipeline_over_floor"] = _median_ratio([(s.delta_ms[k], s.floor_ms[k]) for s in samples])
        out[k] = row
    return out


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    ratios = [a / b for a, b in pairs if b > 0]
    return round(statistics.median(ratios), 3) if ratios else None


def p50_ms(row: dict[str, Any], mode: str, key: str = PIPELINE) -> float:
    return float(row[mode]["latency_ms"][key]["p50"])


def summarize(result: BenchResult, turns: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures (see `SUMMARY_DOC` for what each one is)."""
    samples = result.samples
    n = len(turns)
    summary: dict[str, Any] = {
        "conversations": len({(s.conversation) for s in samples}),
        "turns": n,
        "full_every": result.config.stride(n) if n else None,
        "wall_s": round(result.wall_s, 2),
    }
    if not turns:
        return summary
    at = min(result.config.ratio_turn, n - 1)
    window = [r for r in turns if r["full"] is not None and abs(r["index"] - at) <= 5]
    if window:
        d = statistics.median(p50_ms(r, "delta") for r in window)
        f = statistics.median(p50_ms(r, "full") for r in window)
        d_clf = statistics.median(p50_ms(r, "delta", TOTAL) for r in window)
        f_clf = statistics.median(p50_ms(r, "full", TOTAL) for r in window)
        summary["ratio_turn"] = at
        summary["ratio_window"] = [window[0]["index"], window[-1]["index"]]
        summary["delta_ms_at_turn"] = round(d, 3)
        summary["full_ms_at_turn"] = round(f, 3)
        summary["full_over_delta_at_turn"] = round(f / d, 1) if d > 0 else None
        summary["full_over_delta_classifiers_only_at_turn"] = round(f_clf / d_clf, 1) if d_clf > 0 else None
        full_at = min(window, key=lambda r: abs(r["index"] - at))
        summary["full_tokens_at_turn"] = full_at["full"]["tokens"]["tokens_scored"]
    delta = [p50_ms(r, "delta") for r in turns]
    if n >= 50:
        early = statistics.median(delta[10:30])
        summary["delta_flatness_last20_over_10_29"] = round(statistics.median(delta[-20:]) / early, 3)
    else:
        summary["delta_flatness_last20_over_10_29"] = None  # needs at least 50 turns
    summary["delta_ms_p50"] = round(statistics.median(delta), 3)
    summary["floor_ms_p50"] = round(statistics.median(p50_ms(r, "floor", TOTAL) for r in turns), 3)
    summary["pipeline_over_floor"] = _median_ratio(
        [(s.delta_ms[PIPELINE], s.floor_ms[TOTAL]) for s in samples]
    )
    summary["pipeline_overhead_ms_p50"] = round(
        statistics.median(s.delta_ms[PIPELINE] - s.delta_ms[TOTAL] for s in samples), 4
    )
    tok = [r["delta"]["tokens"]["tokens_scored"] for r in turns[1:]] or [0]
    summary["delta_tokens_per_turn"] = {"min": min(tok), "p50": _median_int(tok), "max": max(tok)}
    summary["verdict_mismatches"] = [
        {"conversation": s.conversation, "turn": s.index} for s in samples if s.mismatch
    ]
    return summary


SUMMARY_DOC = {
    "full_over_delta_at_turn": "median full / median delta pipeline latency over the full-measured turns "
    "within 5 of ratio_turn",
    "delta_flatness_last20_over_10_29": "median delta latency of the last 20 turns / of turns 10-29 "
    "(1.0: flat)",
    "pipeline_over_floor": "median over turns of delta pipeline wall time / sum of the raw classifier "
    "updates on the same new items",
    "pipeline_overhead_ms_p50": "median of pipeline wall time - the classifiers' own time in it",
}


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

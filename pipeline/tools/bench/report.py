"""The benchmark's outputs: bench.json, the markdown report, and the plots' files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from deltaguard.tools.bench.plots import plot_all
from deltaguard.tools.bench.samples import TOTAL
from deltaguard.tools.bench.summary import p50_ms


def markdown(data: dict[str, Any]) -> str:
    """The report as markdown: headline figures, per-classifier table, sample turns."""
    s = data["summary"]
    cfg = data["config"]
    source = cfg["transcript"] or (
        f"{cfg['conversations']} synthetic agent rollout(s), {cfg['turns']} turns x {cfg['tool_tokens']} "
        f"tool tokens, seed {cfg['seed']}"
    )
    lines = [
        "# DeltaGuard bench: delta against full rescoring",
        "",
        f"Source: {source}. Classifiers: "
        + ", ".join(f"`{k}` {v}" for k, v in data["classifiers"].items())
        + f". Full mode measured every {s.get('full_every')} turn(s). "
        f"{data['environment']['cpus']} CPUs, Python {data['environment']['python']}.",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {k} | {_fmt(v)} |" for k, v in s.items()),
        "",
        "Latency per turn (ms) over all measured turns; `floor` is the raw classifiers' `update` on the "
        "same new items; `total` is the sum of the classifiers, `pipeline` the wall time of the whole call.",
        "",
        "| name | delta p50 | delta p95 | delta p99 | full p50 | full p95 | full p99 | floor p50 "
        "| floor p95 | floor p99 | delta tokens p50 | full tokens p50 | pipeline/floor |",
        "|---|" + "---:|" * 12,
    ]
    for name, row in data["per_classifier"].items():
        floor = row.get("floor_ms", {})
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    *(_fmt(row["delta_ms"][p]) for p in ("p50", "p95", "p99")),
                    *(_fmt(row["full_ms"][p]) for p in ("p50", "p95", "p99")),
                    *(_fmt(floor[p]) if floor else "" for p in ("p50", "p95", "p99")),
                    _fmt(row["delta_tokens"]["p50"]) if "delta_tokens" in row else "",
                    _fmt(row["full_tokens"]["p50"]) if "full_tokens" in row else "",
                    _fmt(row.get("pipeline_over_floor", "")),
                ]
            )
            + " |"
        )
    turns = data["turns"]
    if turns:
        picks = sorted({0, 1, 10, 50, 100, 150, 190, 199, len(turns) - 1} & set(range(len(turns))))
        lines += [
            "",
            "Selected turns (p50 over conversations, ms):",
            "",
            "| turn | new tokens | delta pipeline | delta classifiers | floor | full pipeline "
            "| full tokens |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i in picks:
            r = turns[i]
            full = r["full"]
            lines.append(
                f"| {r['index']} | {r['new_tokens']} | {_fmt(p50_ms(r, 'delta'))} | "
                f"{_fmt(p50_ms(r, 'delta', TOTAL))} | {_fmt(p50_ms(r, 'floor', TOTAL))} | "
                + (f"{_fmt(p50_ms(r, 'full'))} | {full['tokens']['tokens_scored']} |" if full else "- | - |")
            )
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "none" if not value else json.dumps(value)
    return "n/a" if value is None else str(value)


def write_outputs(data: dict[str, Any], out: Path, plots: bool = True) -> dict[str, Path]:
    """Write `data` (`BenchResult.to_json()`) into `out` as bench.json, bench.md and the
    PNG plots; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
    paths["json"].write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(data), encoding="utf-8")
    if plots and data["turns"]:
        paths.update(plot_all(data, out))
    return paths


def copy_figure(paths: dict[str, Path], dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths["main_png"], dest)

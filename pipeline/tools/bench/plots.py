"""The benchmark's PNG plots (matplotlib, the `bench` extra)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deltaguard.errors import DeltaGuardError
from deltaguard.tools.bench.samples import PIPELINE, TOTAL
from deltaguard.tools.bench.summary import p50_ms

_DELTA, _FULL, _FLOOR = "tab:blue", "tab:red", "0.45"


def _series(turns: Sequence[dict[str, Any]], mode: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in turns:
        if r[mode] is not None and key in r[mode]["latency_ms"]:
            xs.append(r["index"])
            ys.append(max(p50_ms(r, mode, key), 1e-4))  # log axes
    return xs, ys


def _latency_axes(ax: Any, turns: Sequence[dict[str, Any]], key: str, title: str, unit: str) -> None:
    full = _series(turns, "full", key)
    sparse = len(full[0]) < len(turns)  # measured every k-th turn: show the points
    ax.plot(*full, color=_FULL, label="full rescoring", marker="." if sparse else None)
    ax.plot(*_series(turns, "delta", key), color=_DELTA, label="delta (DeltaGuard)")
    floor_key = TOTAL if key == PIPELINE else key
    ax.plot(*_series(turns, "floor", floor_key), color=_FLOOR, linestyle="--", label="floor (raw models)")
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel(f"{unit} per turn (ms)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)


def _breakdown_axes(ax: Any, turns: Sequence[dict[str, Any]], names: Sequence[str], unit: str) -> None:
    xs = [r["index"] for r in turns]
    layers = [[p50_ms(r, "delta", n) for r in turns] for n in names]
    overhead = [max(0.0, p50_ms(r, "delta") - p50_ms(r, "delta", TOTAL)) for r in turns]
    ax.stackplot(xs, *layers, overhead, labels=[*names, "pipeline overhead"], alpha=0.85)
    ax.set_xlabel("turn")
    ax.set_ylabel(f"delta {unit} per turn (ms)")
    ax.set_title("Where a delta turn's time goes")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(True, alpha=0.25)


def plot_all(data: dict[str, Any], out: Path) -> dict[str, Path]:
    """bench.png (the headline figure), latency_per_classifier.png, delta_breakdown.png."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise DeltaGuardError(
            "the benchmark's plots need matplotlib: pip install 'deltaguard[bench]' (or pass --no-plots)"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = data["turns"]
    names = list(data["classifiers"])
    s = data["summary"]
    cpu = data["config"].get("clock") == "cpu"
    unit = "CPU time" if cpu else "latency"
    whole = "pipeline, CPU time" if cpu else "pipeline wall time"
    paths = {
        "main_png": out / "bench.png",
        "per_classifier_png": out / "latency_per_classifier.png",
        "breakdown_png": out / "delta_breakdown.png",
    }

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    _latency_axes(ax1, turns, PIPELINE, f"Safety cost per turn ({whole})", unit)
    ax1.legend(loc="upper left", fontsize="small")
    _breakdown_axes(ax2, turns, names, unit)
    ratio = s.get("full_over_delta_at_turn")
    flat = s.get("delta_flatness_last20_over_10_29")
    cfg = data["config"]
    source = cfg["transcript"] or (
        f"{cfg['turns']}-turn agent rollout, {cfg['tool_tokens']} tokens per tool output"
    )
    fig.suptitle(
        f"DeltaGuard, delta vs full rescoring: {source}"
        + (f"; full/delta at turn {s.get('ratio_turn')}: {ratio}x" if ratio else "")
        + (f"; flatness {flat}" if flat else "")
        + (f"; pipeline/floor {s.get('pipeline_over_floor')}" if s.get("pipeline_over_floor") else ""),
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(paths["main_png"], dpi=110)
    plt.close(fig)

    keys = [PIPELINE, *names]
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        _latency_axes(ax, turns, key, f"all classifiers ({whole})" if key == PIPELINE else key, unit)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(loc="upper left", fontsize="small")
    fig.suptitle("Latency per turn and per classifier: delta, full rescoring, raw-model floor")
    fig.tight_layout()
    fig.savefig(paths["per_classifier_png"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    _breakdown_axes(ax, turns, names, unit)
    fig.tight_layout()
    fig.savefig(paths["breakdown_png"], dpi=110)
    plt.close(fig)
    return paths

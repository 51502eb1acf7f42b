"""What `deltaguard eval` and `deltaguard calibrate` write: eval.json, eval.md, policy.json
and the ROC and precision-recall curves as SVG.

The curves are written as SVG text directly, so the quickstart install (no matplotlib)
draws them. Every file is rendered in memory and staged in a temporary folder beside the
output before any is moved into place: a failure leaves the output folder as it was,
never a report without its policy or a policy from a run that failed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from html import escape
from pathlib import Path

from deltaguard.errors import DeltaGuardError
from deltaguard.state.policy import Policy
from deltaguard.tools.evaluate import EvalResult, markdown

PALETTE = ("#c62828", "#6a1b9a", "#1565c0", "#2e7d32", "#ef6c00", "#00838f", "#5d4037", "#ad1457")
SIZE, MARGIN = 360, 48  # the plot square and the room for axis labels, in SVG pixels


def curve_points(pos: Sequence[float], neg: Sequence[float], kind: str) -> list[tuple[float, float]]:
    """(x, y) per threshold, from the strictest down: ROC (FPR, recall) or PR (recall, precision)."""
    points = []
    for t in sorted(set([*pos, *neg, 1.1]), reverse=True):
        tp = sum(s >= t for s in pos)
        fp = sum(s >= t for s in neg)
        if kind == "roc":
            points.append((fp / len(neg), tp / len(pos)))
        elif tp + fp:
            points.append((tp / len(pos), tp / (tp + fp)))
    return points


def curve_svg(result: EvalResult, kind: str) -> str:
    """One curve per category that has both positives and negatives."""
    title = "ROC" if kind == "roc" else "precision-recall"
    xlabel, ylabel = ("false-positive rate", "recall") if kind == "roc" else ("recall", "precision")
    width, height = SIZE + 2 * MARGIN + 170, SIZE + 2 * MARGIN
    x0, y0 = MARGIN, MARGIN + SIZE  # the origin, bottom left

    def xy(x: float, y: float) -> str:
        return f"{x0 + x * SIZE:.1f},{y0 - y * SIZE:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{x0 + SIZE / 2}" y="{MARGIN / 2}" text-anchor="middle" font-size="14">{title}</text>',
        f'<rect x="{x0}" y="{MARGIN}" width="{SIZE}" height="{SIZE}" fill="none" stroke="#333"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        gx, gy = x0 + tick * SIZE, y0 - tick * SIZE
        parts += [
            f'<line x1="{gx}" y1="{MARGIN}" x2="{gx}" y2="{y0}" stroke="#ddd"/>',
            f'<line x1="{x0}" y1="{gy}" x2="{x0 + SIZE}" y2="{gy}" stroke="#ddd"/>',
            f'<text x="{gx}" y="{y0 + 16}" text-anchor="middle">{tick:g}</text>',
            f'<text x="{x0 - 6}" y="{gy + 4}" text-anchor="end">{tick:g}</text>',
        ]
    parts += [
        f'<text x="{x0 + SIZE / 2}" y="{y0 + 36}" text-anchor="middle">{xlabel}</text>',
        f'<text transform="translate(14,{MARGIN + SIZE / 2}) rotate(-90)" '
        f'text-anchor="middle">{ylabel}</text>',
    ]
    drawn = 0
    for name, report in result.reports.items():
        if not report.positives or not report.negatives:
            continue
        pos = [c.scores.get(name, 0.0) for c in result.conversations if name in c.categories]
        neg = [c.scores.get(name, 0.0) for c in result.conversations if name not in c.categories]
        points = curve_points(pos, neg, kind)
        if kind == "roc":
            points = [(0.0, 0.0), *points]
        colour = PALETTE[drawn % len(PALETTE)]
        label = escape(f"{name} (n+={report.positives})")
        legend_y = MARGIN + 14 + drawn * 18
        parts += [
            f'<polyline data-category="{escape(name)}" fill="none" stroke="{colour}" stroke-width="2" '
            f'points="{" ".join(xy(x, y) for x, y in points)}"/>',
            f'<line x1="{x0 + SIZE + 14}" y1="{legend_y - 4}" x2="{x0 + SIZE + 34}" y2="{legend_y - 4}" '
            f'stroke="{colour}" stroke-width="2"/>',
            f'<text x="{x0 + SIZE + 40}" y="{legend_y}">{label}</text>',
        ]
        drawn += 1
    if not drawn:
        parts.append(
            f'<text x="{x0 + SIZE / 2}" y="{MARGIN + SIZE / 2}" text-anchor="middle">'
            "no category has both positives and negatives</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def render_outputs(result: EvalResult, base: Policy, plots: bool = True) -> dict[str, tuple[str, str]]:
    """{key: (file name, text)} of everything a run writes."""
    files = {
        "report": ("eval.json", json.dumps(result.to_json(), indent=2) + "\n"),
        "markdown": ("eval.md", markdown(result) + "\n"),
        "policy": ("policy.json", json.dumps(result.policy(base), indent=2) + "\n"),
    }
    if plots:
        for kind in ("roc", "pr"):
            files[kind] = (f"{kind}.svg", curve_svg(result, kind))
    return files


def write_outputs(result: EvalResult, out: Path, base: Policy, plots: bool = True) -> dict[str, Path]:
    """Write every output file into `out`, all of them or (on failure) none."""
    files = render_outputs(result, base, plots)
    try:
        out.mkdir(parents=True, exist_ok=True)
        in_the_way = [name for name, _ in files.values() if (out / name).is_dir()]
        if in_the_way:
            raise DeltaGuardError(f"{out}: {', '.join(in_the_way)} is a folder; nothing was written")
        staging = Path(tempfile.mkdtemp(prefix=".eval-", dir=out))
    except OSError as exc:
        raise DeltaGuardError(f"{out}: cannot write the outputs ({exc}); nothing was written") from exc
    try:
        for name, text in files.values():
            (staging / name).write_text(text, encoding="utf-8")
        # Same folder, same filesystem: each move is a rename.
        for name, _ in files.values():
            (staging / name).replace(out / name)
    except OSError as exc:
        raise DeltaGuardError(f"{out}: cannot write the outputs ({exc})") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {key: out / name for key, (name, _) in files.items()}

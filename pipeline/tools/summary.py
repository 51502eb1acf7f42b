"""Readable summaries: the table `deltaguard replay` prints at the end."""

from __future__ import annotations

from collections import Counter

import numpy as np

from deltaguard.tools.replay import ReplayResult


def percentiles(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return (0.0, 0.0, 0.0)
    p50, p95, p99 = np.percentile(np.asarray(values), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def tokens_line(mode: str, tokens: int, history_tokens: int) -> str:
    """One figure per mode: full mode's own count is the cost of rescoring the history (the
    item-token estimate beside it would contradict it: views and outputs count too)."""
    if mode == "full":
        return f"tokens scored: {tokens:,} (the whole history, rescored every turn)"
    return (
        f"tokens scored: {tokens:,} (each turn's new items; the history re-read every turn holds "
        f"{history_tokens:,} item tokens: --mode full measures its cost)"
    )


def replay_summary(result: ReplayResult) -> str:
    turns = [t for conv in result.conversations for t in conv["turns"]]
    decisions = Counter(t["decision"] for t in turns)
    latencies: dict[str, list[float]] = {}
    for t in turns:
        for name, ms in t["latency_ms"].items():
            latencies.setdefault(name, []).append(ms)
    tokens = sum(t["tokens_scored"] for t in turns)
    out = [
        f"mode {result.mode}: {len(result.conversations)} conversations, {len(turns)} turns, "
        f"{len(result.errors)} bad lines, {result.unscored_items} unscored items kept as history",
        "decisions: " + ", ".join(f"{d} {decisions.get(d, 0)}" for d in ("allow", "flag", "block")),
        tokens_line(result.mode, tokens, result.history_tokens),
        "",
        table(
            ["latency per turn (ms)", "p50", "p95", "p99", "max"],
            [
                [name, *(f"{v:.3f}" for v in percentiles(vals)), f"{max(vals):.3f}"]
                for name, vals in sorted(latencies.items(), key=lambda kv: kv[0] != "total")
            ],
        ),
    ]
    flagged = [
        (conv["id"], t["index"], t["decision"], ",".join(t["flagged_categories"]))
        for conv in result.conversations
        for t in conv["turns"]
        if t["decision"] != "allow"
    ]
    if flagged:
        shown = flagged[:20]
        out += [
            "",
            table(["conversation", "turn", "decision", "categories"], [[str(c) for c in r] for r in shown]),
        ]
        if len(flagged) > len(shown):
            out.append(f"... and {len(flagged) - len(shown)} more flagged or blocked turns")
    return "\n".join(out)

"""Markdown reports of the benchmarks in eval/."""

from __future__ import annotations

from pathlib import Path


def write_report(path: Path, lines: list[str]) -> None:
    """Write the report's lines to `path` (creating its folder) and print them."""
    report = "\n".join(lines) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report, encoding="utf-8")
    print(report)

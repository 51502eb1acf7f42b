"""`deltaguard bench`: its arguments, and the command that runs and reports."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from deltaguard.tools.bench import measure
from deltaguard.tools.bench.measure import CLOCKS, run_bench
from deltaguard.tools.bench.report import copy_figure, markdown, write_outputs
from deltaguard.tools.bench.samples import FULL_EVERY_TURNS, BenchConfig


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_bench_parser(sub: Any) -> None:
    """Add the `bench` subcommand to the CLI's subparsers."""
    from deltaguard.classifiers.registry import parse_names

    bp = sub.add_parser(
        "bench",
        help="per-turn classifier latency, delta against full rescoring; JSON, markdown and PNG plots",
        description=measure.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bp.add_argument("--turns", type=_positive, default=200, help="turns per synthetic rollout")
    bp.add_argument("--tool-tokens", type=_positive, default=1000, help="tokens per tool output")
    bp.add_argument("--conversations", type=_positive, default=1, help="rollouts (one seed each)")
    bp.add_argument("--seed", type=int, default=0)
    bp.add_argument("--transcript", type=Path, metavar="FILE", help="measure this transcript file instead")
    bp.add_argument(
        "--full-every",
        type=_positive,
        metavar="K",
        help=f"measure full mode every K-th turn (default: every turn up to {FULL_EVERY_TURNS} turns, "
        f"then about {FULL_EVERY_TURNS} turns in all)",
    )
    bp.add_argument("--ratio-turn", type=int, default=190, help="where full/delta is reported")
    bp.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: latency; cpu: this process's CPU time (steadier on a loaded machine)",
    )
    bp.add_argument(
        "--classifiers",
        type=parse_names,
        help="comma-separated classifier names (default: the default set)",
    )
    bp.add_argument("--models-dir", type=Path, metavar="DIR")
    bp.add_argument("--out", type=Path, default=Path("eval/out/bench"), help="output directory")
    bp.add_argument("--figure", type=Path, help="also copy the main PNG (bench.png) here")
    bp.add_argument("--no-plots", action="store_true", help="JSON and markdown only")
    bp.add_argument("--no-progress", action="store_true", help="never show the progress bar")


def cmd_bench(args: argparse.Namespace) -> int:
    import sys

    from tqdm import tqdm

    from deltaguard.classifiers.registry import DEFAULT_NAMES
    from deltaguard.models import MODELS_DIR
    from deltaguard.state.loading import build_scorer

    if args.transcript is not None and not args.transcript.is_file():
        print(f"deltaguard bench: {args.transcript}: no such file", file=sys.stderr)
        return 2
    if not args.no_plots and find_spec("matplotlib") is None:  # fail before the run, not after
        print(
            "deltaguard bench: plots need matplotlib: pip install 'deltaguard[bench]', or --no-plots",
            file=sys.stderr,
        )
        return 2
    config = BenchConfig(
        turns=args.turns,
        tool_tokens=args.tool_tokens,
        conversations=args.conversations,
        seed=args.seed,
        full_every=args.full_every,
        transcript=args.transcript,
        ratio_turn=args.ratio_turn,
        clock=args.clock,
    )
    scorer = build_scorer(args.classifiers or DEFAULT_NAMES, args.models_dir or MODELS_DIR)
    show = sys.stderr.isatty() and not args.no_progress
    bars: list[Any] = []

    def progress(total: int) -> Callable[[], None]:
        bar = tqdm(total=total, unit="turn", disable=not show, file=sys.stderr)
        bars.append(bar)
        return lambda: bar.update(1)

    try:
        result = run_bench(config, scorer, progress)
    finally:
        for bar in bars:
            bar.close()
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    if not result.samples:
        print("deltaguard bench: nothing to measure", file=sys.stderr)
        return 1
    data = result.to_json()
    paths = write_outputs(data, args.out, plots=not args.no_plots)
    if args.figure is not None and "main_png" in paths:
        copy_figure(paths, args.figure)
        paths["figure"] = args.figure
    print(markdown(data))
    for name, path in paths.items():
        print(f"{name}: {path}")
    mismatches = data["summary"].get("verdict_mismatches")
    if mismatches:
        print(f"deltaguard bench: delta and full verdicts differ at {mismatches}", file=sys.stderr)
        return 1
    return 1 if result.errors else 0

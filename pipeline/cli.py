"""The `deltaguard` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from pipeline.errors import DeltaGuardError
from pipeline.summary import replay_summary


def _threshold(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not sep or not name or not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected CATEGORY=VALUE with VALUE in [0, 1], got {text!r}")
    return name, number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="deltaguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    rp = sub.add_parser("replay", help="score every conversation of a transcript file turn by turn")
    rp.add_argument("file", type=Path, help="transcript file (JSONL, format v1)")
    rp.add_argument("--mode", choices=("delta", "full"), default="delta")
    rp.add_argument("--json", dest="json_out", type=Path, help="write the per-turn verdicts here")
    rp.add_argument(
        "--threshold",
        action="append",
        type=_threshold,
        default=[],
        metavar="CATEGORY=VALUE",
        help="override a category's threshold (repeatable)",
    )
    rp.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    return parser


def cmd_replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from pipeline.replay import replay
    from pipeline.runtime import build_scorer
    from pipeline.transcripts import count_lines, read_transcripts

    if not args.file.is_file():
        print(f"deltaguard replay: {args.file}: no such file", file=sys.stderr)
        return 2
    scorer = build_scorer(thresholds=dict(args.threshold))
    show = sys.stderr.isatty() and not args.no_progress
    with tqdm(total=count_lines(args.file), unit="conv", disable=not show, file=sys.stderr) as bar:
        result = replay(read_transcripts(args.file), scorer, args.mode, on_line=lambda: bar.update(1))
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    if args.json_out:
        args.json_out.write_text(json.dumps(result.to_json(), ensure_ascii=False) + "\n", encoding="utf-8")
    print(replay_summary(result))
    return 1 if result.errors else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "replay":
            return cmd_replay(args)
    except DeltaGuardError as exc:
        print(f"deltaguard {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())

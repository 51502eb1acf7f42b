"""Command-line options the evaluations share."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_models_option(
    parser: argparse.ArgumentParser,
    default: Path | None = None,
    help: str = "a models folder other than the shipped one",
) -> None:
    """The models folder an evaluation reads: `--models-dir DIR`, as `deltaguard replay`
    spells it (`--models DIR` also reads), into `args.models`; `default` None where the
    evaluation hands it on and none means the shipped models."""
    parser.add_argument("--models-dir", "--models", dest="models", type=Path, default=default, help=help)

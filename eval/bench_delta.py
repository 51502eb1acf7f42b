"""Delta against full rescoring on long agent rollouts: a wrapper for `deltaguard bench`.

    python -m eval.bench_delta --turns 200 --tool-tokens 1000

Kept so that this command keeps working; the measurement lives in `pipeline/tools/bench.py`
and takes the same arguments as `deltaguard bench` (see `deltaguard bench --help`).
Writes eval/out/bench/{bench.json,bench.md,bench.png,latency_per_classifier.png,
delta_breakdown.png} unless `--out` says otherwise.
"""

from __future__ import annotations

import sys
from pathlib import Path

from deltaguard.cli import main as deltaguard

OUT = Path(__file__).resolve().parent / "out" / "bench"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not any(a == "--out" or a.startswith("--out=") for a in args):
        args += ["--out", str(OUT)]
    return deltaguard(["bench", *args])


if __name__ == "__main__":
    sys.exit(main())

"""The one progress logger of the recipes and evaluations: `[name HH:MM:SS] message`,
flushed at once so that a long build shows where it is."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def make_log(name: str, *, stderr: bool = False, clock: bool = True) -> Callable[[str], None]:
    """A `log(msg)` printing under `name` (with the time of day unless `clock` is false), to
    stdout or, with `stderr`, to stderr: where an evaluation's stdout is its report."""

    def log(msg: str) -> None:
        prefix = f"{name} {time.strftime('%H:%M:%S')}" if clock else name
        print(f"[{prefix}] {msg}", file=sys.stderr if stderr else sys.stdout, flush=True)

    return log

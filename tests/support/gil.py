"""Whether a call lets other threads run: a C call that holds the GIL throughout (a regex
over a whole text, a tokenizer's `encode`) freezes every other thread of the process,
the gateway's event loop included, for as long as it runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def ticks_during(fn: Callable[..., Any], *args: Any) -> tuple[Any, int]:
    """`fn(*args)`'s result, and how often a thread that wakes every millisecond ran
    meanwhile: once or twice when `fn` held the GIL throughout, about once a millisecond
    of its run when it let go."""
    ticks = 0
    stop = threading.Event()
    started = threading.Event()

    def tick() -> None:
        nonlocal ticks
        started.set()
        while not stop.is_set():
            time.sleep(0.001)
            ticks += 1

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    started.wait()
    before = ticks
    try:
        result = fn(*args)
        during = ticks - before
    finally:
        stop.set()
        ticker.join()
    return result, during

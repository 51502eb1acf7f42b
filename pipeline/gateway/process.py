"""What `deltaguard serve` does to its own process before and while it serves: glibc's heap
arenas bounded, the loaded heap out of the garbage collector's generations, the GIL's
turns shortened, and what large requests freed handed back to the OS."""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import platform
import sys
import threading

from deltaguard import defaults

_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_M_ARENA_MAX = -8


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library, when it is glibc (whose mallopt and malloc_trim these call)."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def _mallopt(param: int, value: int, env: str) -> bool:
    """glibc's `mallopt(param, value)`, unless the operator set `env` (which glibc reads)
    or the C library is another; True when set."""
    libc = _glibc()
    if env in os.environ or libc is None:
        return False
    try:
        return bool(libc.mallopt(param, value))
    except AttributeError:
        return False


def limit_malloc_arenas(arenas: int = defaults.MALLOC_ARENAS) -> bool:
    """At most `arenas` glibc heap arenas (`mallopt(M_ARENA_MAX)`); True when set.

    glibc gives threads that allocate at once arenas of their own (up to eight per core)
    and hands back little of what is freed inside one: with the event loop, the request
    path's and the background lanes' threads each churning through large requests, the
    soak's RSS peaked at 694 MB with the state stores full; with two arenas, at 552 MB.
    Call it before the threads start; an operator's own MALLOC_ARENA_MAX is left to glibc,
    and another C library is left alone (False)."""
    return _mallopt(_M_ARENA_MAX, arenas, "MALLOC_ARENA_MAX")


def fix_mmap_threshold(threshold: int = defaults.MALLOC_MMAP_THRESHOLD) -> bool:
    """Allocations of `threshold` bytes or more are mapped on their own and unmapped when
    freed (`mallopt(M_MMAP_THRESHOLD)`); True when set.

    glibc starts at 128 KiB, but each large block freed raises the threshold (up to
    32 MiB), and from then on a large request's buffers (its text, the tokenizer's and the
    models' arrays) come from the heap, where the small blocks the stores keep meanwhile
    settle among them and pin its pages: in a soak, while what malloc held stayed level
    (mallinfo2), glibc's heap grew 7 MB in six minutes and RSS's floor with it. Fixed, those
    buffers go back to the OS as they are freed: RSS's floor was ~40 MB lower from the
    load's second minute on, and rose 6.5 MB over the last five minutes against 11.3
    (`python -m eval.soak --duration 600`, a run each). Call it before the threads start;
    an operator's own MALLOC_MMAP_THRESHOLD_ is left to glibc, and another C library is
    left alone (False)."""
    return _mallopt(_M_MMAP_THRESHOLD, threshold, "MALLOC_MMAP_THRESHOLD_")


def prepare_heap(thresholds: tuple[int, int, int] = defaults.GC_THRESHOLDS) -> int:
    """Before serving: move everything alive now (the classifiers' models, modules, the
    app) out of the garbage collector's generations for the process's life, and collect
    at `thresholds` (`gc.set_threshold`); returns how many objects were frozen.

    A full collection walks every tracked object while the event loop and every request
    in flight wait: with the models in, each took ~100 ms; what remains is the state
    stores' objects. At the default thresholds (700, 10, 10) one ran every few seconds
    under load; at these, young objects (a request's) die in the young generations and
    full collections run minutes apart. The young collections stay small: the
    middle one walked ~70,000 objects (the stores' newest records among them), 20-50 ms,
    at (10000, 10, 10); at (2000, 10, 50) a fifth as many, 3-10 ms, five times as often,
    and the steady tenant's p99 in two pairs of soaks was 71.8 and 70.1 ms against 74.2
    and 74.3. Full collections walk the stores (~250 ms once they are full): at
    (2000, 10, 200) a quarter as often, p99 74.9 ms against 79.9 in a pair of 300 s soaks
    (requests over 200 ms: 4 against 14); cyclic garbage waits longer. Frozen objects
    are still freed when nothing refers to them; only cycles among them stay, and what
    startup loads is kept anyway."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return gc.get_freeze_count()


def shorten_gil_turns(seconds: float = defaults.GIL_SWITCH_S) -> float:
    """Let a thread hold the GIL at most `seconds` while another waits for it
    (`sys.setswitchinterval`); returns the interval it replaces.

    The event loop gives the GIL up at each socket call and then waits for it again: while
    a thread runs Python code over a large request (normalising it, sketching it), each
    of those waits lasts up to the interval, and a turn takes dozens of them. In soaks run
    side by side (docs/hardening.md), a well-behaved tenant's p99 beside 0.8 MB requests
    went from 3.5x its unloaded p99 at Python's 5 ms to 1.9-2.5x at 1 ms; the large
    requests themselves pay for the extra switches."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    return previous


def trim_heap() -> bool:
    """Hand the free pages of every glibc heap back to the OS (`malloc_trim(0)`); True when
    it released any. ctypes lets go of the GIL for the call (~5 ms after a 0.8 MB request)."""
    libc = _glibc()
    if libc is None:
        return False
    try:
        return bool(libc.malloc_trim(0))
    except AttributeError:
        return False


def start_heap_trimming(every_s: float = defaults.HEAP_TRIM_S) -> threading.Event | None:
    """Trim the heap every `every_s` seconds on a daemon thread until the returned event is
    set (None: not glibc, or `every_s` 0).

    A large request allocates its transient buffers in C (the tokenizer's encodings, the
    kernels' and onnxruntime's arrays), and glibc keeps most of what they free inside its
    heaps: in the soak, RSS rose ~100 MB with each of the first 0.8 MB requests and kept
    rising while the Python heap (tracemalloc) stayed level. Trimmed, it comes back to
    what the process holds (one 0.8 MB request scored: 440 MB, 373 MB after the trim)."""
    if every_s <= 0 or _glibc() is None:
        return None
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every_s):
            trim_heap()

    threading.Thread(target=loop, name="heap-trim", daemon=True).start()
    return stop

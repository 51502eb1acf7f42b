"""Running the gateway: in the foreground (`deltaguard serve`) or in the background of
the current process on a free loopback port (the demo, benchmarks and tests)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import platform
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from deltaguard import defaults
from deltaguard.gateway.app import create_app
from deltaguard.gateway.config import GatewayConfig
from deltaguard.serving import draining_websockets, read_deadlines
from deltaguard.state.loading import build_scorer
from deltaguard.state.policy import load_policy
from deltaguard.state.scoring import Scorer

_M_ARENA_MAX = -8  # glibc's malloc.h


def _uvicorn_config(app: Any, config: GatewayConfig, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=read_deadlines(config.header_timeout_s, config.body_timeout_s),
        timeout_keep_alive=config.idle_timeout_s,  # type: ignore[arg-type]  (any seconds work)
        ws=draining_websockets(app.state.gateway.draining.set, config.shutdown_drain_s),
        ws_max_size=64 * 1024 * 1024,  # frames are checked against the gateway's own limits
        timeout_graceful_shutdown=int(config.shutdown_drain_s) + 2,
        lifespan="on",
    )


def scorer_for(config: GatewayConfig) -> Scorer:
    """The configured classifiers, plus any opt-in ones the monitor lane names (the encoder),
    with the configured policy."""
    names = tuple(dict.fromkeys((*config.classifiers, *config.monitor_classifiers)))
    return build_scorer(names, policy=load_policy(Path(config.policy_path)) if config.policy_path else None)


def limit_malloc_arenas(arenas: int = defaults.MALLOC_ARENAS) -> bool:
    """At most `arenas` glibc heap arenas (`mallopt(M_ARENA_MAX)`); True when set.

    glibc gives threads that allocate at once arenas of their own (up to eight per core)
    and hands back little of what is freed inside one: with the event loop, the request
    path's and the background lanes' threads each churning through large requests, the
    soak's RSS peaked at 694 MB with the state stores full; with two arenas, at 552 MB.
    Call it before the threads start; an operator's own MALLOC_ARENA_MAX is left to glibc,
    and another C library is left alone (False)."""
    if "MALLOC_ARENA_MAX" in os.environ or platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False


def prepare_heap(thresholds: tuple[int, int, int] = defaults.GC_THRESHOLDS) -> int:
    """Before serving: move everything alive now (the classifiers' models, modules, the
    app) out of the garbage collector's generations for the process's life, and collect
    at `thresholds` (`gc.set_threshold`); returns how many objects were frozen.

    A full collection walks every tracked object while the event loop and every request
    in flight wait: with the models in, each took ~100 ms; what remains is the state
    stores' objects. At the default thresholds (700, 10, 10) one ran every few seconds
    under load; at these, young objects (a request's) die in the young generations and a
    full collection runs about a minute apart. Frozen objects are still freed when
    nothing refers to them; only cycles among them stay, and what startup loads is kept
    anyway."""
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


def serve(
    config: GatewayConfig, scorer: Scorer | None = None, log_level: str = "info", routes: Sequence[Any] = ()
) -> None:
    """Serve until SIGINT/SIGTERM; lanes and sinks drain on the way out. `routes`: more
    routes to mount (the review page, built above the gateway layer)."""
    app = create_app(config, scorer or scorer_for(config), routes=routes)
    prepare_heap()
    shorten_gil_turns(config.gil_switch_s)
    # uvicorn drains on SIGTERM, then re-raises it to the handler it found: make that
    # handler a no-op so a drained shutdown exits 0 instead of dying by the signal.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.Server(_uvicorn_config(app, config, config.host, config.port, log_level)).run()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def running_gateway(
    config: GatewayConfig, scorer: Scorer | None = None, log_level: str = "warning", **app_kwargs: Any
) -> AsyncIterator[tuple[str, Any]]:
    """Start the gateway on 127.0.0.1 in this event loop; yields (base URL, app)."""
    port = config.port or free_port()
    config = config.model_copy(update={"host": "127.0.0.1", "port": port})
    app = create_app(config, scorer or scorer_for(config), **app_kwargs)
    server = uvicorn.Server(_uvicorn_config(app, config, "127.0.0.1", port, log_level))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("gateway exited during startup")
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        await task

"""Running the gateway: in the foreground (`deltaguard serve`) or in the background of
the current process on a free loopback port (the demo, benchmarks and tests)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from deltaguard.gateway.app import create_app
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.process import prepare_heap, shorten_gil_turns, start_heap_trimming
from deltaguard.serving import draining_websockets, read_deadlines
from deltaguard.state.loading import build_scorer
from deltaguard.state.policy import load_policy
from deltaguard.state.scoring import Scorer


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
        ws_per_message_deflate=config.ws_compression,
        loop=config.event_loop,
        timeout_graceful_shutdown=int(config.shutdown_drain_s) + 2,
        lifespan="on",
    )


def scorer_for(config: GatewayConfig) -> Scorer:
    """The configured classifiers, plus any opt-in ones the monitor lane names (the encoder),
    with the configured policy and the paths the operator vouches for."""
    names = tuple(dict.fromkeys((*config.classifiers, *config.monitor_classifiers)))
    policy = load_policy(Path(config.policy_path)) if config.policy_path else None
    return build_scorer(names, policy=policy, vouch=config.vouch)


def serve(
    config: GatewayConfig, scorer: Scorer | None = None, log_level: str = "info", routes: Sequence[Any] = ()
) -> None:
    """Serve until SIGINT/SIGTERM; lanes and sinks drain on the way out. `routes`: more
    routes to mount (the review page, built above the gateway layer)."""
    app = create_app(config, scorer or scorer_for(config), routes=routes)
    prepare_heap()
    shorten_gil_turns(config.gil_switch_s)
    start_heap_trimming(config.heap_trim_s)
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

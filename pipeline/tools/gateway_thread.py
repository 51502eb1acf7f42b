"""A real gateway on 127.0.0.1 in a background thread, for callers without an event loop
of their own (the request-path trace of eval/request_path.py, the gateway's tests).

    with gateway_thread(GatewayConfig(port=0), build_scorer()) as (base_url, app):
        ...  # any client, sync or async, against base_url

`in_thread` is the general form: any async context manager entered and held on a thread
with its own event loop (the tests' simulated upstreams use it too).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway

T = TypeVar("T")
START_SECONDS = 60.0  # model loading on a loaded machine


@contextmanager
def in_thread(
    open_: Callable[[], AbstractAsyncContextManager[T]], name: str, start_seconds: float = START_SECONDS
) -> Iterator[T]:
    """Yields what `open_()` yields, entered on a new thread's event loop; leaving the block
    exits it there (a server drains as on shutdown). An error entering it is raised here,
    in the caller's thread; so is a start slower than `start_seconds`."""
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        box["stop"], box["loop"] = asyncio.Event(), asyncio.get_running_loop()
        async with open_() as running:
            box["running"] = running
            ready.set()
            await box["stop"].wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not ready.wait(start_seconds):
        raise TimeoutError(f"{name} did not start within {start_seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    try:
        yield box["running"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(30)


@contextmanager
def gateway_thread(config: GatewayConfig, scorer, **app_kwargs) -> Iterator[tuple[str, Any]]:
    """Yields (base_url, app); the server stops (and drains) when the block ends."""
    with in_thread(lambda: running_gateway(config, scorer, **app_kwargs), name="gateway") as running:
        yield running

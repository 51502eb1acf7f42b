"""A real gateway on 127.0.0.1, in a background thread, driven by the official SDK."""

from __future__ import annotations

import asyncio
import threading
from contextlib import contextmanager

import pytest
from openai import AsyncOpenAI, OpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway


@contextmanager
def gateway_thread(config: GatewayConfig, scorer, **app_kwargs):
    """Yields (base_url, app); the server stops (and drains) when the block ends."""
    ready = threading.Event()
    stop: dict = {}
    box: dict = {}

    def run():
        async def main():
            stop["event"] = asyncio.Event()
            stop["loop"] = asyncio.get_running_loop()
            async with running_gateway(config, scorer, **app_kwargs) as (base, app):
                box["base"], box["app"] = base, app
                ready.set()
                await stop["event"].wait()

        try:
            asyncio.run(main())
        except BaseException as exc:  # surfaced to the test below
            box["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(60)
    if "error" in box:
        raise box["error"]
    try:
        yield box["base"], box["app"]
    finally:
        stop["loop"].call_soon_threadsafe(stop["event"].set)
        thread.join(30)


@pytest.fixture(scope="module")
def gateway(scorer):
    config = GatewayConfig(port=0, sim_tokens_per_s=20_000)
    with gateway_thread(config, scorer) as running:
        yield running


def clients(base: str, api_key: str = "test"):
    ws = base.replace("http://", "ws://") + "/v1"
    return (
        OpenAI(base_url=base + "/v1", api_key=api_key, max_retries=0),
        AsyncOpenAI(base_url=base + "/v1", api_key=api_key, websocket_base_url=ws, max_retries=0),
    )


async def recv_until_done(conn):
    """The socket's next terminal event of a response (completed, failed, or an error)."""
    async for event in conn:
        if event.type in ("response.completed", "response.failed", "error"):
            return event
    raise AssertionError("socket closed")


def websocket_turn(aclient: AsyncOpenAI, request: dict) -> list:
    """One `response.create` over a new socket: every event up to its terminal one."""

    async def run() -> list:
        seen = []
        async with aclient.beta.responses.connect() as conn:
            await conn.send({"type": "response.create", **request})
            async for event in conn:
                seen.append(event)
                if event.type in ("response.completed", "response.failed", "error"):
                    break
        return seen

    return asyncio.run(run())


@pytest.fixture()
def sdk(gateway):
    return clients(gateway[0])

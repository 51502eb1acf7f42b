"""A real gateway on 127.0.0.1, in a background thread, driven by the official SDK."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI, OpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.tools.gateway_thread import gateway_thread


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


async def websocket_turn(aclient, body: dict) -> list:
    """Every event of one `response.create` (`body`) on a new socket, up to its terminal one."""
    seen = []
    async with aclient.beta.responses.connect() as conn:
        await conn.send({"type": "response.create", **body})
        async for event in conn:
            seen.append(event)
            if event.type in ("response.completed", "response.failed", "error"):
                return seen
    raise AssertionError("socket closed")


@pytest.fixture()
def sdk(gateway):
    return clients(gateway[0])

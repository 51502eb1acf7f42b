"""A client that disconnects mid-stream is billed for what the upstream generated until
the gateway closed its stream, over SSE and WebSocket alike; a finished one, once."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets

from deltaguard.events import BillingEvent
from deltaguard.gateway.config import GatewayConfig
from deltaguard.sinks import MemorySink
from tests.pipeline.gateway.conftest import gateway_thread

REPLY_TOKENS = 200


@pytest.fixture(scope="module")
def slow_gateway(scorer):
    billing = MemorySink()
    config = GatewayConfig(port=0, sim_tokens_per_s=100, sim_reply_tokens=REPLY_TOKENS, sim_tool_calls=0)
    with gateway_thread(config, scorer, billing_sink=billing) as (base, _):
        yield base, billing


def billed(billing: MemorySink, response_id: str, timeout_s: float = 10.0) -> list[BillingEvent]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [e for e in billing.events if isinstance(e, BillingEvent) and e.response_id == response_id]
        if found:
            time.sleep(0.3)  # and no second one follows
            return [e for e in billing.events if isinstance(e, BillingEvent) and e.response_id == response_id]
        time.sleep(0.05)
    return []


def test_an_sse_client_that_disconnects_is_billed_for_what_was_generated(slow_gateway):
    base, billing = slow_gateway
    body = {"model": "m", "input": "tell me a long story", "stream": True}
    response_id, deltas = None, 0
    with httpx.stream("POST", base + "/v1/responses", json=body, timeout=30) as r:
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            deltas += event["type"] == "response.output_text.delta"
            if deltas >= 10:
                break  # leave mid-stream: the connection closes with this block
    assert response_id is not None
    (event,) = billed(billing, response_id)
    assert 10 <= event.output_tokens < REPLY_TOKENS and event.input_tokens > 0


def test_a_websocket_client_that_disconnects_is_billed(slow_gateway):
    base, billing = slow_gateway

    async def run() -> str:
        url = base.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(url) as ws:
            await ws.send(json.dumps({"type": "response.create", "model": "m", "input": "a long story"}))
            response_id, deltas = None, 0
            while deltas < 10:
                event = json.loads(await ws.recv())
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                deltas += event["type"] == "response.output_text.delta"
            return response_id  # the socket closes mid-response

    response_id = asyncio.run(run())
    (event,) = billed(billing, response_id)
    assert 10 <= event.output_tokens < REPLY_TOKENS


def test_a_completed_response_is_billed_once_with_the_upstreams_usage(slow_gateway):
    base, billing = slow_gateway
    r = httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=30)
    (event,) = billed(billing, r.json()["id"])
    assert event.output_tokens == r.json()["usage"]["output_tokens"]

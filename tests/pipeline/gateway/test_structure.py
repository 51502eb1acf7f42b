"""Deeply nested or huge request JSON: a specific 400 before any item is parsed or scored,
one log line per refused request, and a WebSocket that stays open."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import clients, gateway_thread, recv_until_done
from tests.support.serve import served


def nested(depth: int) -> dict:
    value: dict = {"leaf": "text to score"}
    for _ in range(depth):
        value = {"k": value}
    return value


def bodies(depth: int) -> list[tuple[str, dict]]:
    """(path, body) with the nesting where each endpoint would walk it."""
    deep = nested(depth)
    return [
        ("/v1/responses", {"model": "m", "input": [{"type": "custom_thing", "data": deep}]}),
        ("/v1/responses", {"model": "m", "input": "hi", "tools": [{"type": "function", "parameters": deep}]}),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi", "x": deep}]}),
        ("/v1/guard/input", {"input": [{"type": "custom_thing", "data": deep}]}),
    ]


def refusal_lines(log: str) -> list[str]:
    """The log's lines but the access log's."""
    return [line for line in log.splitlines() if line.strip() and '" 4' not in line and '" 2' not in line]


@pytest.mark.parametrize("depth", [100, 500, 900])
def test_deep_nesting_is_a_400_with_one_log_line(depth):
    with served([]) as gw:
        for path, body in bodies(depth):
            before = gw.log.read_text(errors="replace")
            r = httpx.post(gw.base + path, json=body, timeout=60)
            assert r.status_code == 400, (path, r.text[:300])
            assert r.json()["error"]["code"] == "nesting_too_deep"
            time.sleep(0.2)
            added = gw.log.read_text(errors="replace")[len(before) :]
            lines = refusal_lines(added)
            assert len(lines) == 1 and "nesting_too_deep" in lines[0], added[-2000:]
        assert httpx.post(gw.base + "/v1/responses", json={"model": "m", "input": "ok"}).status_code == 200


def test_too_many_values_is_refused_before_parsing(scorer):
    config = GatewayConfig(port=0, max_json_values=5_000)
    with gateway_thread(config, scorer) as (base, _):
        items = [{"type": "custom_thing", "data": list(range(10))} for _ in range(600)]
        r = httpx.post(base + "/v1/responses", json={"model": "m", "input": items}, timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_many_values"


def test_deep_nesting_over_websocket_is_an_error_event_and_the_socket_stays_open(scorer):
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=50_000), scorer) as (base, _):
        _, aclient = clients(base)

        async def run():
            async with aclient.beta.responses.connect() as conn:
                deep = {"type": "custom_thing", "data": nested(900)}
                await conn.send({"type": "response.create", "model": "m", "input": [deep]})
                refused = await recv_until_done(conn)
                await conn.send({"type": "response.create", "model": "m", "input": "and now a normal turn"})
                return refused, await recv_until_done(conn)

        refused, after = asyncio.run(run())
    assert refused.type == "error" and refused.error.code == "nesting_too_deep"
    assert after.type == "response.completed"

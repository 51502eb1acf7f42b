"""Host and Origin allow-lists on the gateway's API and its WebSocket handshake."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import gateway_thread

BODY = {"model": "m", "input": "hello"}


@pytest.fixture(scope="module")
def loopback_gateway(scorer):
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=50_000), scorer) as (base, _):
        yield base


def ws_open(base: str, headers: dict[str, str], host: str | None = None) -> str:
    """ "open" when the handshake succeeds, else the refusal's HTTP status; `host`: the
    name the URL (and so the Host header) carries, connecting to 127.0.0.1 all the same."""

    async def run() -> str:
        url = base.replace("http://", "ws://") + "/v1/responses"
        if host is not None:
            url = url.replace("127.0.0.1", host)
        try:
            async with websockets.connect(url, additional_headers=headers, host="127.0.0.1"):
                return "open"
        except websockets.InvalidStatus as exc:
            return str(exc.response.status_code)

    return asyncio.run(run())


def test_a_cross_site_post_is_refused_and_a_same_origin_one_is_not(loopback_gateway):
    base = loopback_gateway
    r = httpx.post(base + "/v1/responses", json=BODY, headers={"Origin": "https://attacker.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed"
    assert httpx.post(base + "/v1/responses", json=BODY, headers={"Origin": "null"}).status_code == 403
    assert httpx.post(base + "/v1/responses", json=BODY, headers={"Origin": base}).status_code == 200
    assert httpx.post(base + "/v1/responses", json=BODY).status_code == 200  # no browser, no Origin


def test_a_rebound_host_is_refused(loopback_gateway):
    base = loopback_gateway
    for host in ("attacker.example", "attacker.example:8400", "127.0.0.1.nip.io"):
        r = httpx.post(base + "/v1/responses", json=BODY, headers={"Host": host})
        assert r.status_code == 403 and r.json()["error"]["code"] == "host_not_allowed", host
    port = base.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", f"[::1]:{port}", "127.0.0.1"):
        assert httpx.get(base + "/healthz", headers={"Host": host}).status_code == 200, host


def test_the_websocket_handshake_checks_host_and_origin(loopback_gateway):
    base = loopback_gateway
    assert ws_open(base, {"Origin": "https://attacker.example"}) == "403"
    assert ws_open(base, {}, host="attacker.example") == "403"
    assert ws_open(base, {}, host="localhost") == "open"
    assert ws_open(base, {"Origin": base}) == "open"
    assert ws_open(base, {}) == "open"


def test_allow_lists_are_configurable(scorer):
    config = GatewayConfig(
        port=0, allowed_hosts=("gateway.internal",), allowed_origins=("https://dashboard.internal",)
    )
    with gateway_thread(config, scorer) as (base, _):
        dashboard = {"Host": "gateway.internal", "Origin": "https://dashboard.internal"}
        assert httpx.get(base + "/healthz", headers=dashboard).status_code == 200
        assert httpx.get(base + "/healthz").status_code == 403  # 127.0.0.1 is no longer listed
        foreign = {"Host": "gateway.internal", "Origin": "https://attacker.example"}
        assert httpx.get(base + "/healthz", headers=foreign).status_code == 403
    with gateway_thread(GatewayConfig(port=0, allowed_hosts=("*",)), scorer) as (base, _):
        assert httpx.get(base + "/healthz", headers={"Host": "anything.example"}).status_code == 200

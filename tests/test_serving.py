"""Read deadlines on the gateway's connections: slow-header and silent clients are dropped,
idle keep-alive connections closed, and well-behaved requests and WebSockets unharmed."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import pytest

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import clients, gateway_thread, recv_until_done


@pytest.fixture(scope="module")
def strict_gateway(scorer):
    config = GatewayConfig(
        port=0, sim_tokens_per_s=50_000, header_timeout_s=0.6, body_timeout_s=0.6, idle_timeout_s=0.6
    )
    with gateway_thread(config, scorer) as (base, _):
        yield base


def _connect(base: str) -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def closed_after(sock: socket.socket, trickle: bytes, every_s: float, limit_s: float) -> float | None:
    """Send `trickle` a byte at a time; seconds until the server closed, None if it never did."""
    t0 = time.monotonic()
    sock.settimeout(every_s)
    for byte in trickle:
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            pass
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - t0
        if time.monotonic() - t0 > limit_s:
            return None
    return None


def test_a_client_trickling_its_headers_is_dropped(strict_gateway):
    head = b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 400
    socks = [_connect(strict_gateway) for _ in range(20)]
    try:
        took = closed_after(socks[0], head, every_s=0.05, limit_s=5)
        assert took is not None and took < 2.0, took
        for s in socks[1:]:  # the others, silent meanwhile, were dropped too
            s.settimeout(2)
            assert s.recv(1) == b""
    finally:
        for s in socks:
            s.close()


def test_a_client_trickling_its_body_is_dropped(strict_gateway):
    sock = _connect(strict_gateway)
    try:
        sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n\r\n")
        took = closed_after(sock, b'{"input": "' + b"a" * 4000, every_s=0.05, limit_s=5)
        assert took is not None and took < 2.0, took
    finally:
        sock.close()


def test_an_idle_keep_alive_connection_is_closed_and_good_clients_are_unharmed(strict_gateway):
    with httpx.Client(base_url=strict_gateway) as client:
        assert client.post("/v1/responses", json={"model": "m", "input": "hi"}).status_code == 200
    sock = _connect(strict_gateway)
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        sock.settimeout(3)
        t0, got = time.monotonic(), b""
        while chunk := sock.recv(4096):  # the response, then the close of the idle connection
            got += chunk
        assert got.startswith(b"HTTP/1.1 200 OK") and time.monotonic() - t0 < 2.0
    finally:
        sock.close()
    # A WebSocket outlives the deadlines: they cover reading an HTTP request only.
    _, aclient = clients(strict_gateway)

    async def run():
        async with aclient.beta.responses.connect() as conn:
            await asyncio.sleep(1.5)
            await conn.send({"type": "response.create", "model": "m", "input": "still here"})
            return await recv_until_done(conn)

    assert asyncio.run(run()).type == "response.completed"

"""deltaguard.tools.gateway_thread: a real gateway served from a background thread."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from deltaguard.gateway.config import GatewayConfig
from deltaguard.tools.gateway_thread import gateway_thread


def test_the_gateway_serves_until_the_block_ends(scorer):
    with gateway_thread(GatewayConfig(port=0), scorer) as (base, app):
        assert app is not None
        assert httpx.get(base + "/healthz", timeout=10).status_code == 200
        threads = [t for t in threading.enumerate() if t.name == "gateway"]
    assert threads and not any(t.is_alive() for t in threads)
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/healthz", timeout=2)


def test_a_server_that_cannot_start_raises_in_the_callers_thread(scorer):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # uvicorn reports the failed bind as SystemExit, from the server thread to this one
        with pytest.raises(SystemExit), gateway_thread(GatewayConfig(port=port), scorer):
            pass

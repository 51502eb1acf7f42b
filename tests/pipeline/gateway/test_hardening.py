"""Bad input, limits, stalls, overload and SIGTERM: errors are specific, nothing is lost."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from deltaguard.bounds import RequestLimits
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.http_errors import RequestError
from deltaguard.gateway.server import free_port
from deltaguard.gateway.wire import read_create
from tests.pipeline.gateway.conftest import clients, gateway_thread
from tests.support.upstreams import SlowUpstream, StallingUpstream

LIMITS = RequestLimits(max_request_bytes=1 << 20)

# Flat JSON garbage: generating deep trees costs far more than parsing them, and
# depth itself is covered by the nested-JSON cases below.
leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = leaves | st.lists(leaves, max_size=4) | st.dictionaries(st.text(max_size=8), leaves, max_size=4)
item_like = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning", "bogus"])
        | json_values,
        "role": st.sampled_from(["user", "assistant", "system", "robot"]) | json_values,
        "content": st.text(max_size=50)
        | st.lists(st.dictionaries(st.sampled_from(["type", "text"]), json_values)),
        "call_id": json_values,
        "name": json_values,
        "arguments": json_values,
        "output": json_values,
    },
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": json_values,
        "input": st.text(max_size=40) | st.lists(item_like | json_values, max_size=6) | json_values,
        "previous_response_id": st.text(max_size=300) | json_values,
        "stream": json_values,
        "tools": json_values,
        "instructions": json_values,
    },
)


@settings(max_examples=20_000, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(raw=st.binary(max_size=200) | bodies.map(lambda b: json.dumps(b).encode()))
def test_request_parser_never_crashes(raw):
    try:
        req = read_create(raw, LIMITS)
    except RequestError as err:
        assert err.status in (400, 413) and err.code and err.message
    else:
        assert isinstance(req.items, list) and all(i.kind for i in req.items)


def test_oversized_item_gets_a_limit_error_and_the_socket_serves_the_next_turn(scorer):
    config = GatewayConfig(port=0, sim_tokens_per_s=50_000)
    with gateway_thread(config, scorer) as (base, _):
        _, aclient = clients(base)

        async def run():
            async with aclient.beta.responses.connect() as conn:
                big = "x" * (12 * 1024 * 1024)
                await conn.send(
                    {"type": "response.create", "model": "m", "input": [{"role": "user", "content": big}]}
                )
                first = await anext(aiter(conn))
                await conn.send({"type": "response.create", "model": "m", "input": "and now a normal turn"})
                async for event in conn:
                    if event.type in ("response.completed", "error"):
                        return first, event

        first, second = asyncio.run(run())
        assert first.type == "error" and first.error.code == "request_too_large"
        assert second.type == "response.completed"


def test_binary_frames_and_deep_json_over_websocket(scorer):
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=50_000), scorer) as (base, _):
        _, aclient = clients(base)

        async def run():
            async with aclient.beta.responses.connect() as conn:
                codes = []
                for frame in (b"\xff\xfe\x00", "[" * 100_000 + "]" * 100_000, '{"type": "response.create"}'):
                    await conn.send_raw(frame)
                    event = await anext(aiter(conn))
                    codes.append(event.error.code)
                await conn.send({"type": "response.create", "model": "m", "input": "ok"})
                async for event in conn:
                    if event.type == "response.completed":
                        return codes

        assert asyncio.run(run()) == ["invalid_frame", "invalid_json", "missing_required_parameter"]


def test_stalled_upstream_is_a_clear_error(scorer):
    config = GatewayConfig(port=0, upstream_stall_timeout_s=0.3)
    with gateway_thread(config, scorer, upstream=StallingUpstream()) as (base, _):
        client, _ = clients(base)
        t0 = time.perf_counter()
        with pytest.raises(openai.APIStatusError) as exc:
            client.responses.create(model="m", input="hello")
        assert exc.value.status_code == 502 and "sent nothing" in exc.value.body["message"]
        assert time.perf_counter() - t0 < 5


def test_overload_is_shed_with_503(scorer):
    config = GatewayConfig(port=0, max_inflight_responses=1, upstream_stall_timeout_s=5)

    with gateway_thread(config, scorer, upstream=SlowUpstream(1.0)) as (base, _):
        results = []

        def call():
            r = httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi"}, timeout=10)
            results.append((r.status_code, (r.json().get("error") or {}).get("code")))

        threads = [threading.Thread(target=call) for _ in range(3)]
        for t in threads:
            t.start()
            time.sleep(0.1)
        for t in threads:
            t.join()
        assert sorted(results) == [(200, None), (503, "server_overloaded"), (503, "server_overloaded")]


def test_sigterm_during_a_burst_loses_no_billing_event(tmp_path: Path):
    port = free_port()
    billing = tmp_path / "billing.jsonl"
    spool = tmp_path / "spool.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "deltaguard.cli", "serve", "--port", str(port), "--billing", str(billing)]
    cmd += ["--sim-tokens-per-s", "400", "--spool", str(spool), "--log-level", "warning"]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        completed: list[str] = []
        lock = threading.Lock()

        def worker(i):
            for j in range(40):
                try:
                    r = httpx.post(
                        f"http://127.0.0.1:{port}/v1/responses",
                        json={"model": "m", "input": f"q {i} {j}"},
                        timeout=30,
                    )
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    with lock:
                        completed.append(r.json()["id"])

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(2.0)
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    events = []
    for path in (billing, spool):
        if path.exists():
            events += [json.loads(line) for line in path.read_text().splitlines()]
    billed = {e["response_id"] for e in events if e["kind"] == "billing"}
    assert completed, "the burst completed no response before SIGTERM"
    assert set(completed) <= billed


def garbage_frame(rng: random.Random) -> str | bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 64))
    if kind == 1:
        return "".join(chr(rng.randrange(32, 0x2FF)) for _ in range(rng.randrange(1, 40)))
    junk = [None, True, 3, -1.5, "x", [], {}, [{"role": "user"}], {"role": "robot", "content": 1}]
    body = {
        rng.choice(["input", "model", "previous_response_id", "tools", "stream", "zzz"]): rng.choice(junk)
    }
    if kind == 2:
        body["type"] = "response.create"
    return json.dumps(body)


def test_garbage_frames_never_drop_the_socket_or_corrupt_its_conversation(scorer):
    """300 generated garbage frames between the turns of one conversation, which opens with
    a long message: a turn that refolded the history would score all of it again."""
    rng = random.Random(5)
    samples = [garbage_frame(rng) for _ in range(300)]
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=100_000, sim_reply_tokens=4), scorer) as (
        base,
        _,
    ):
        _, aclient = clients(base)

        async def run():
            async with aclient.beta.responses.connect() as conn:

                async def until_done():
                    async for event in conn:
                        if event.type in ("response.completed", "error", "response.failed"):
                            return event

                opening = " ".join(f"Line {i} of the build log reports nothing unusual." for i in range(300))
                await conn.send({"type": "response.create", "model": "m", "input": opening})
                prev = (await until_done()).response
                scored = [prev.safety["tokens_scored"]]
                for i, frame in enumerate(samples):
                    await conn.send_raw(frame)
                    await until_done()  # an error, or a response to a valid-by-chance frame
                    if i % 50 == 49:
                        await conn.send(
                            {
                                "type": "response.create",
                                "model": "m",
                                "input": f"turn {i}",
                                "previous_response_id": prev.id,
                            }
                        )
                        done = await until_done()
                        assert done.type == "response.completed", done
                        prev = done.response
                        scored.append(prev.safety["tokens_scored"])
                return scored

        opening, *scored = asyncio.run(run())
        # Each turn scores its own few tokens, the rules' tails of what came before, and the
        # previous answer when the post-inference lane has not scored it yet: a small share
        # of the opening message, which a refold would score again.
        assert len(scored) == 6 and max(scored) < opening / 5, (opening, scored)


@pytest.mark.parametrize("compression", [False, True])
def test_websocket_compression_is_offered_only_when_asked_for(scorer, compression):
    """permessage-deflate costs the shared event loop CPU per frame, and compressing a secret
    beside attacker-chosen text leaks it through frame sizes: off unless configured."""
    import websockets

    config = GatewayConfig(port=0, sim_tokens_per_s=50_000, ws_compression=compression)
    with gateway_thread(config, scorer) as (base, _):

        async def run():
            url = base.replace("http://", "ws://") + "/v1/responses"
            async with websockets.connect(url, compression="deflate") as ws:
                await ws.send(json.dumps({"type": "response.create", "model": "m", "input": "ok"}))
                while json.loads(await ws.recv())["type"] != "response.completed":
                    pass
                return ws.response.headers.get("Sec-WebSocket-Extensions")

        negotiated = asyncio.run(run())
    assert ("permessage-deflate" in (negotiated or "")) is compression

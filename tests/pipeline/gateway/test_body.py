"""Large request bodies are parsed off the event loop, as their tenant's work."""

from __future__ import annotations

import asyncio
import json

import httpx

from deltaguard.bounds import RequestLimits
from deltaguard.gateway.body import BodyParser
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.wire import read_create
from deltaguard.lanes.stage import SafetyStage
from tests.pipeline.gateway.conftest import gateway_thread


def create(raw: bytes | str):
    return read_create(raw, RequestLimits())


async def loop_turns_during(parse, raw: bytes, tenant: str) -> tuple[object, int]:
    """`parse`'s result, and how many times another task on the loop ran meanwhile."""
    turns = 0
    stop = asyncio.Event()

    async def other() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    before = turns
    try:
        result = await parse(create, raw, tenant)
        during = turns - before
    finally:
        stop.set()
        await task
    return result, during


async def test_a_large_body_is_parsed_on_the_pool_while_the_loop_serves_the_rest(scorer):
    large = json.dumps({"model": "m", "input": "lorem ipsum dolor " * 20_000}).encode()
    small = json.dumps({"model": "m", "input": "hi"}).encode()
    stage = SafetyStage(scorer)
    await stage.start()
    try:
        parser = BodyParser(stage, inline_bytes=64 * 1024)
        req, turns = await loop_turns_during(parser, large, "acme")
        assert req.items[0].tokens == 60_000 and turns >= 1  # the loop ran while it parsed
        req, turns = await loop_turns_during(parser, small, "acme")
        assert req.items[0].text == "hi" and turns == 0  # small: parsed in place, no thread hop
    finally:
        await stage.aclose()


def test_large_bodies_parsed_off_the_loop_are_answered_and_refused_as_inline_ones(scorer):
    config = GatewayConfig(port=0, parse_inline_bytes=1024, max_json_depth=8)
    with gateway_thread(config, scorer) as (base, _):
        text = "a long file read by the agent. " * 2_000
        r = httpx.post(base + "/v1/responses", json={"model": "m", "input": text}, timeout=60)
        assert r.status_code == 200 and r.json()["status"] == "completed"
        deep = {
            "model": "m",
            "input": [{"type": "custom", "data": {"k": {"k": {"k": {"k": {"k": {"k": {}}}}}}}}],
        }
        deep["pad"] = "x" * 2_000
        r = httpx.post(base + "/v1/responses", json=deep, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["code"] == "nesting_too_deep"

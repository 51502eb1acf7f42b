"""API keys and tenant isolation: one tenant can never continue another's conversation."""

from __future__ import annotations

import asyncio

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import gateway_thread

KEYS = {"key-alpha-123": "alpha", "key-beta-456": "beta"}


@pytest.fixture(scope="module")
def tenant_gateway(scorer):
    with gateway_thread(GatewayConfig(port=0, api_keys=KEYS, sim_tokens_per_s=50_000), scorer) as running:
        yield running


def sync_client(base, key):
    return OpenAI(base_url=base + "/v1", api_key=key, max_retries=0)


def test_wrong_or_missing_key_is_rejected(tenant_gateway):
    base, _ = tenant_gateway
    with pytest.raises(openai.AuthenticationError) as exc:
        sync_client(base, "key-alpha-124").responses.create(model="m", input="hi")
    assert exc.value.body["code"] == "invalid_api_key"


def test_tenant_b_cannot_continue_tenant_a(tenant_gateway):
    base, app = tenant_gateway
    a = sync_client(base, "key-alpha-123")
    b = sync_client(base, "key-beta-456")
    first = a.responses.create(model="m", input="my project is called Falcon")
    with pytest.raises(openai.BadRequestError) as exc:
        b.responses.create(model="m", input="what was my project?", previous_response_id=first.id)
    assert exc.value.body["code"] == "previous_response_not_found"
    assert a.responses.create(model="m", input="go on", previous_response_id=first.id).status == "completed"
    stage = app.state.gateway.stage
    assert first.id in stage.stores[("gate", "alpha")].responses
    assert first.id not in stage.stores[("gate", "beta")].responses


def test_tenant_b_cannot_continue_over_websocket(tenant_gateway):
    base, _ = tenant_gateway
    rid = sync_client(base, "key-alpha-123").responses.create(model="m", input="hello").id
    ws = base.replace("http://", "ws://") + "/v1"

    async def run():
        client = AsyncOpenAI(
            base_url=base + "/v1", api_key="key-beta-456", websocket_base_url=ws, max_retries=0
        )
        async with client.beta.responses.connect() as conn:
            await conn.send(
                {"type": "response.create", "model": "m", "input": "x", "previous_response_id": rid}
            )
            async for event in conn:
                return event

    event = asyncio.run(run())
    assert event.type == "error" and event.error.code == "previous_response_not_found"


def test_websocket_with_a_wrong_key_is_refused(tenant_gateway):
    base, _ = tenant_gateway
    ws = base.replace("http://", "ws://") + "/v1"

    async def run():
        client = AsyncOpenAI(base_url=base + "/v1", api_key="nope", websocket_base_url=ws, max_retries=0)
        async with client.beta.responses.connect() as conn:
            await conn.send({"type": "response.create", "model": "m", "input": "x"})
            async for event in conn:
                return event

    with pytest.raises(Exception) as exc:  # the handshake is refused (HTTP 403)
        asyncio.run(run())
    assert "403" in str(exc.value) or "1008" in str(exc.value) or "rejected" in str(exc.value).lower()


def test_one_tenants_traffic_never_evicts_anothers_state(scorer):
    from deltaguard.lanes.stage import StageConfig
    from deltaguard.state.store import StoreLimits

    limits = StageConfig(store=StoreLimits(max_responses=5, max_snapshots=5))
    with gateway_thread(
        GatewayConfig(port=0, api_keys=KEYS, sim_tokens_per_s=50_000), scorer, stage_config=limits
    ) as (
        base,
        _,
    ):
        a = sync_client(base, "key-alpha-123")
        b = sync_client(base, "key-beta-456")
        kept = a.responses.create(model="m", input="alpha's conversation")
        for i in range(20):
            b.responses.create(model="m", input=f"beta flood {i}")
        assert (
            a.responses.create(model="m", input="still mine", previous_response_id=kept.id).status
            == "completed"
        )

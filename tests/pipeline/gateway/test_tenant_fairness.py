"""Two tenants, one flooding the gateway: the other keeps a classifier thread and its
response slots (the fair scheduling itself: tests/pipeline/lanes/test_limiter.py)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.config_file import ConfigError, effective
from tests.pipeline.gateway.conftest import gateway_thread
from tests.support.upstreams import SlowUpstream

KEYS = {"key-hog": "hog", "key-small": "small"}


def post(base: str, key: str, text: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    r = httpx.post(
        base + "/v1/responses",
        json={"model": "m", "input": text},
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    return r.status_code, time.perf_counter() - t0


def test_several_tenants_hold_all_but_one_classifier_thread_each():
    assert GatewayConfig(api_keys=KEYS).tenant_threads() == 1  # of 2: the other tenant finds one
    assert GatewayConfig(api_keys={"k": "only"}, inference_threads=4).tenant_threads() == 4
    assert GatewayConfig(api_keys=KEYS, tenant_inference_threads=9).tenant_threads() == 2


def test_tenant_weights_come_from_the_config_file_and_reach_the_limiter(tmp_path, scorer):
    path = tmp_path / "deltaguard.toml"
    path.write_text('api_keys = { key-hog = "hog", key-small = "small" }\n[tenant_weights]\nsmall = 3.0\n')
    config, sources = effective(path, environ={})
    assert config.tenant_weights == {"small": 3.0} and sources["tenant_weights"] == f"file {path}"
    with pytest.raises(ConfigError, match=r"tenant_weights\.small"):
        effective(flags={"tenant_weights": {"small": 0}}, environ={})
    with gateway_thread(config.model_copy(update={"port": 0}), scorer) as (_base, app):
        stage = app.state.gateway.stage
        assert stage._limiter.weights == {"small": 3.0}


def test_one_tenant_cannot_take_every_response_slot(scorer):
    config = GatewayConfig(port=0, api_keys=KEYS, max_inflight_per_tenant=2, upstream_stall_timeout_s=10)
    with gateway_thread(config, scorer, upstream=SlowUpstream(1.0)) as (base, _):
        hog: list[tuple[int, float]] = []
        threads = [threading.Thread(target=lambda: hog.append(post(base, "key-hog", "hi"))) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        r = httpx.post(
            base + "/v1/responses",
            json={"model": "m", "input": "hi"},
            headers={"Authorization": "Bearer key-hog"},
        )
        small = post(base, "key-small", "hi")
        for t in threads:
            t.join()
    assert r.status_code == 429 and r.json()["error"]["code"] == "tenant_overloaded"
    assert r.headers["retry-after"] == "1"  # the SDK waits that long before it retries
    assert sorted(code for code, _ in hog) == [200, 200, 429, 429] and small[0] == 200


def test_a_tenants_slots_are_shared_by_every_api(scorer):
    """Responses held by a slow upstream fill the hog's slots: its chat completions and guard
    checks are refused as well, and the other tenant's are not."""
    config = GatewayConfig(port=0, api_keys=KEYS, max_inflight_per_tenant=2, upstream_stall_timeout_s=10)
    with gateway_thread(config, scorer, upstream=SlowUpstream(1.5)) as (base, app):
        hog = [threading.Thread(target=post, args=(base, "key-hog", "hi")) for _ in range(2)]
        for t in hog:
            t.start()
        deadline = time.monotonic() + 10
        while app.state.gateway.slots.by_tenant.get("hog", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        answers = {}
        for key in ("key-hog", "key-small"):
            auth = {"Authorization": f"Bearer {key}"}
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            answers[key, "chat"] = httpx.post(
                base + "/v1/chat/completions", json=chat, headers=auth, timeout=30
            )
            guard = {"messages": [{"role": "user", "content": "hi"}]}
            answers[key, "guard"] = httpx.post(base + "/v1/guard/input", json=guard, headers=auth, timeout=30)
        for t in hog:
            t.join()
        left = dict(app.state.gateway.slots.by_tenant), app.state.gateway.slots.held
    for api in ("chat", "guard"):
        refused = answers["key-hog", api]
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "tenant_overloaded", api
        assert refused.headers["retry-after"] == "1"
        assert answers["key-small", api].status_code == 200, answers["key-small", api].text
    assert left == ({}, 0)  # every slot given back


def test_a_chat_completion_holds_its_slot_while_the_gate_scores(scorer):
    with gateway_thread(GatewayConfig(port=0, api_keys=KEYS), scorer) as (base, app):
        gateway = app.state.gateway
        service = gateway.chat.service
        begin, seen = service.stage.begin, []

        async def watched(tenant, **kwargs):
            seen.append(gateway.slots.by_tenant.get(tenant, 0))
            return await begin(tenant, **kwargs)

        service.stage.begin = watched
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        auth = {"Authorization": "Bearer key-small"}
        r = httpx.post(base + "/v1/chat/completions", json=chat, headers=auth, timeout=30)
        assert r.status_code == 200, r.text
        assert seen == [1] and gateway.slots.by_tenant == {} and gateway.slots.held == 0


def test_conversation_metadata_counts_in_the_stores_byte_limit(scorer):
    with gateway_thread(GatewayConfig(port=0), scorer) as (base, app):
        metadata = {f"k{i}": "v" * 1000 for i in range(50)}
        r = httpx.post(base + "/v1/conversations", json={"metadata": metadata})
        assert r.status_code == 200
        assert app.state.gateway.service.conversations.nbytes >= 50_000

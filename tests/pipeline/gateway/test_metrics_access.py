"""/metrics: labels from closed sets, behind a key once keys are set, no tenant names by default."""

from __future__ import annotations

import random
import string

import httpx

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import gateway_thread

KEYS = {"key-a": "tenant-alpha", "key-b": "tenant-beta"}


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_unknown_item_types_are_counted_as_other(scorer):
    rng = random.Random(7)
    with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=50_000), scorer) as (base, _):
        names = ["".join(rng.choices(string.ascii_letters, k=20_000)) for _ in range(20)]
        for name in names:
            item = {"type": name, "text": "some tool text to score"}
            r = httpx.post(base + "/v1/responses", json={"model": "m", "input": [item]}, timeout=30)
            assert r.status_code == 200, r.text
        text = httpx.get(base + "/metrics").text
    assert len(text) < 200_000
    assert not any(name[:40] in text for name in names)
    assert 'deltaguard_items_total{direction="input",scored="true",type="other"} 20.0' in text


def test_metrics_needs_a_tenant_key_when_keys_are_configured_and_names_no_tenant(scorer):
    config = GatewayConfig(port=0, sim_tokens_per_s=50_000, api_keys=KEYS)
    with gateway_thread(config, scorer) as (base, _):
        for key in KEYS:
            r = httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi"}, headers=_bearer(key))
            assert r.status_code == 200
        assert httpx.get(base + "/metrics").status_code == 401
        assert httpx.get(base + "/metrics", headers=_bearer("wrong")).status_code == 401
        scraped = httpx.get(base + "/metrics", headers=_bearer("key-a"))
    assert scraped.status_code == 200 and "deltaguard_state_cache_total" in scraped.text
    assert "tenant-alpha" not in scraped.text and "tenant-beta" not in scraped.text
    assert 'tenant="all"' in scraped.text


def test_a_metrics_key_is_the_only_key_that_scrapes_and_tenant_labels_are_opt_in(scorer):
    config = GatewayConfig(
        port=0,
        sim_tokens_per_s=50_000,
        api_keys=KEYS,
        metrics_api_key="scrape-key",
        metrics_tenant_labels=True,
    )
    with gateway_thread(config, scorer) as (base, _):
        httpx.post(base + "/v1/responses", json={"model": "m", "input": "hi"}, headers=_bearer("key-a"))
        assert httpx.get(base + "/metrics", headers=_bearer("key-a")).status_code == 401
        scraped = httpx.get(base + "/metrics", headers=_bearer("scrape-key"))
    assert scraped.status_code == 200 and 'tenant="tenant-alpha"' in scraped.text

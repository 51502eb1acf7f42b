"""`deltaguard serve --broker`: the gateway publishes turns and billing to Kafka, a worker
runs the monitor lane, and its flag blocks the conversation's next turn at the gateway,
for the tenant whose conversation it is."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import openai
import pytest

from deltaguard.gateway.config import GatewayConfig
from deltaguard.state.loading import build_scorer
from tests.pipeline.gateway.conftest import clients, gateway_thread
from tests.pipeline.kafka.conftest import Broker, Collector, WorkerProcess, test_settings

pytestmark = pytest.mark.kafka


def test_worker_flag_blocks_the_next_turn_at_the_gateway(broker: Broker, workers: list, tmp_path: Path):
    settings = test_settings(broker.url, tmp_path)
    config_path = tmp_path / "kafka.json"
    config_path.write_text(settings.model_dump_json(), encoding="utf-8")
    worker = WorkerProcess("w1", settings, tmp_path, "secrets").start()
    workers.append(worker)
    asyncio.run(worker.ready(60))

    gate_only_pii = build_scorer(names=("pii",))  # secrets runs on the worker only
    config = GatewayConfig(
        port=0,
        broker=broker.url,
        kafka_config=str(config_path),
        sim_tokens_per_s=20_000,
        api_keys={"key-a": "tenant-a"},
    )
    with gateway_thread(config, gate_only_pii) as (base, app):
        client, _ = clients(base, api_key="key-a")
        gateway = app.state.gateway
        asyncio.run(_wait(lambda: gateway.flag_subscriber is not None))
        first = client.responses.create(model="m", input="deploy with AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE")
        assert first.safety["decision"] == "allow"  # not gated here: the worker flags it
        deadline = time.time() + 30
        blocked = None
        while time.time() < deadline:
            try:
                client.responses.create(model="m", input="next step", previous_response_id=first.id)
            except openai.BadRequestError as exc:
                blocked = exc
                break
            time.sleep(0.2)
        assert blocked is not None, "the worker's flag never reached the gateway"
        assert blocked.body["code"] == "safety_blocked" and blocked.body["categories"] == ["secrets"]

    async def billed() -> set[str]:
        collector = await Collector(settings, [settings.billing_topic]).start()
        try:
            await collector.wait_for(
                lambda: first.id in {b["response_id"] for b in collector.of_kind("billing")}, 20, "billing"
            )
            return {b["response_id"] for b in collector.of_kind("billing") if b["tenant"] == "tenant-a"}
        finally:
            await collector.aclose()

    assert first.id in asyncio.run(billed())


async def _wait(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met")
        await asyncio.sleep(0.05)

"""The LiteLLM guardrail's stage: started once, closed for good, undelivered events spooled.

No LiteLLM here: the stage imports the proxy's modules only where it uses them (the
SIGTERM path through a real proxy is in test_litellm.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from deltaguard.chat_items import chat_history_items
from deltaguard.errors import LaneClosed
from deltaguard.events import BillingEvent
from deltaguard.integrations.litellm_lifecycle import GuardrailStage, event_sink, spool_undelivered
from deltaguard.integrations.litellm_settings import DeltaGuardSettings
from deltaguard.sinks import JsonlSink, MemorySink
from deltaguard.telemetry.metrics import PrometheusMetrics


def billing(n: int) -> BillingEvent:
    return BillingEvent.build(
        conversation_id="c1",
        response_id=f"r{n}",
        input_tokens=n,
        cached_input_tokens=0,
        output_tokens=1,
        classifier_ms=0.5,
    )


def test_event_sink_is_a_file_when_given_a_path(tmp_path):
    assert isinstance(event_sink(None, fsync=False), MemorySink)
    sink = event_sink(tmp_path / "new" / "flags.jsonl", fsync=False)
    assert isinstance(sink, JsonlSink) and (tmp_path / "new").is_dir()


def test_undelivered_events_are_appended_to_the_spool(tmp_path, caplog):
    path = tmp_path / "spool" / "left.jsonl"
    spool_undelivered([billing(1)], path)
    spool_undelivered([billing(2), billing(3)], path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["response_id"] for e in lines] == ["r1", "r2", "r3"] and lines[0]["kind"] == "billing"
    spool_undelivered([], tmp_path / "untouched.jsonl")
    assert not (tmp_path / "untouched.jsonl").exists()
    spool_undelivered([billing(4)], None)
    assert "1 events undelivered at shutdown (no spool_path)" in caplog.text


async def test_the_gate_starts_once_and_closes_for_good(tmp_path):
    settings = DeltaGuardSettings(classifiers=["lexical"], billing_path=tmp_path / "billing.jsonl")
    stage = GuardrailStage(settings, PrometheusMetrics())
    first, second = await asyncio.gather(stage.ready(), stage.ready())
    assert first is second and await stage.ready() is first
    turn = await first.check(chat_history_items([{"role": "user", "content": "hello there"}]), "t")
    assert not turn.blocked
    await stage.aclose()
    with pytest.raises(LaneClosed, match="closed"):
        await stage.ready()
    await stage.aclose()  # a second close is a no-op
    # The task that waits for a shutdown signal ends with the stage.
    for _ in range(100):
        if not [t for t in asyncio.all_tasks() if t.get_name() == "deltaguard:closer"]:
            break
        await asyncio.sleep(0.01)
    else:
        pytest.fail("the closer task outlived the stage")


async def test_warm_up_logs_a_failed_start_and_leaves_the_next_call_to_fail(tmp_path, caplog):
    stage = GuardrailStage(DeltaGuardSettings(classifiers=["no-such-classifier"]), PrometheusMetrics())
    await stage.warm_up()
    assert "DeltaGuard failed to start" in caplog.text
    with pytest.raises(Exception, match="no-such-classifier"):
        await stage.ready()
    await stage.aclose()

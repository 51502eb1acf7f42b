from __future__ import annotations

import pytest

from deltaguard.lanes.stage import SafetyStage, Usage
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import Scorer
from deltaguard.telemetry import tracing
from tests.support.toy import ItemCounter

sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry import trace  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402


async def test_each_lane_emits_a_span_when_enabled():
    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert tracing.enable()
    try:
        stage = SafetyStage(Scorer([ItemCounter(), ItemCounter("watch", "monitor")]), monitor=("watch",))
        await stage.start()
        turn = await stage.begin(new_items=[parse_item({"role": "user", "content": "hi"})], response_id="r1")
        await turn.finish([parse_item({"role": "assistant", "content": "yo"})], Usage(1, 0, 1))
        await stage.aclose()
    finally:
        tracing.disable()
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == [
        "deltaguard.gate",
        "deltaguard.monitor",
        "deltaguard.monitor",
        "deltaguard.post_inference",
    ]
    assert all(s.attributes["response_id"] == "r1" for s in exporter.get_finished_spans())

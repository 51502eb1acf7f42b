"""The faust worker against a real broker: same flags as the embedded mode, through
rebalances and a killed worker (recovery from the changelog)."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from deltaguard.classifiers.registry import DEFAULT_NAMES
from deltaguard.events import FlagEvent, TurnEvent
from deltaguard.gateway.server import free_port
from deltaguard.kafka.sink import KafkaEventSink
from deltaguard.kafka.topics import ensure_topics
from deltaguard.kafka.worker import seek_to_committed
from deltaguard.state.loading import build_scorer
from tests.pipeline.kafka.conftest import Broker, Collector, WorkerProcess, test_settings
from tests.pipeline.kafka.corpus import (
    assert_flags_match,
    conversations,
    expected_flags,
    interleaved_turn_events,
    sentinels,
)

pytestmark = pytest.mark.kafka

CLASSIFIERS = ",".join(DEFAULT_NAMES)


def flags_by_response(collector: Collector) -> dict[str, FlagEvent]:
    out: dict[str, FlagEvent] = {}
    for value in collector.of_kind("flag"):
        flag = FlagEvent.model_validate(value)
        # at least once: a redelivered turn must carry the same id, hence the same flag
        assert out.get(flag.response_id, flag).event_id == flag.event_id
        out[flag.response_id] = flag
    return out


async def publish(sink: KafkaEventSink, events: list[TurnEvent], pause_every: int = 0) -> None:
    for i, event in enumerate(events):
        await sink.send([event])
        if pause_every and i % pause_every == 0:
            await asyncio.sleep(0.02)  # live-ish traffic, so rebalances happen mid-stream


async def setup(broker: Broker, tmp_path: Path, **overrides: Any) -> tuple[Any, Collector, KafkaEventSink]:
    settings = test_settings(broker.url, tmp_path, **overrides)
    await ensure_topics(settings)
    collector = await Collector(settings, [settings.flags_topic, settings.errors_topic]).start()
    sink = KafkaEventSink(settings)
    await sink.start()
    return settings, collector, sink


async def test_flags_out_equal_embedded_replay(broker: Broker, workers: list[WorkerProcess], tmp_path: Path):
    settings, collector, sink = await setup(broker, tmp_path, web_enabled=True, web_port=free_port())
    convs = conversations()
    expected = expected_flags(convs, build_scorer())
    workers.append(WorkerProcess("w1", settings, tmp_path, CLASSIFIERS).start())
    try:
        await publish(sink, list(interleaved_turn_events(convs)))
        # A continuation of a response nobody has seen: an error record, never a pass.
        orphan = TurnEvent.build(
            conversation_id="orphan",
            response_id="orphan#1",
            previous_response_id="never-seen",
            items=[{"role": "user", "content": "hi"}],
        )
        # A stateless client resending its whole history resumes from the table.
        conv = convs[0]
        history = [i.to_wire() for t in conv.turns for i in (*t.input, *t.output)]
        resent = TurnEvent.build(
            conversation_id=conv.id, response_id=f"{conv.id}#resent", previous_response_id=None, items=history
        )
        await sink.send([orphan, resent])
        want = sentinels(convs) | {resent.response_id}
        await collector.wait_for(lambda: want <= set(flags_by_response(collector)), 60, "sentinel flags")
        await collector.wait_for(lambda: collector.of_kind("turn_error"), 10, "the orphan's error record")
    finally:
        await sink.aclose()
        await collector.aclose()
    got = flags_by_response(collector)
    resent_flag = got.pop(resent.response_id)
    assert_flags_match(got, expected)
    last = expected[f"{conv.id}#{len(conv.turns) - 1}"]
    assert resent_flag.categories == last["categories"]
    (error,) = collector.of_kind("turn_error")
    assert error["code"] == "previous_response_not_found"
    assert error["response_id"] == "orphan#1"
    assert error["previous_response_id"] == "never-seen"
    assert error["turn"]["items"] == orphan.items
    assert "previous_response_not_found" in workers[0].log()
    # The worker's Prometheus metrics, on loopback.
    text = await asyncio.to_thread(scrape, f"http://127.0.0.1:{settings.web_port}/metrics")
    samples = {
        (s.name, s.labels.get("outcome")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    scored = samples[("deltaguard_worker_turns_total", "scored")]
    assert scored >= len(list(interleaved_turn_events(convs))) + 1  # every turn, and the resent history
    assert samples[("deltaguard_worker_turns_total", "flagged")] >= len(expected) + 1
    assert samples[("deltaguard_worker_turns_total", "error")] == 1
    assert samples[("deltaguard_worker_conversations", None)] == len(convs)  # the orphan is not kept
    assert samples[("deltaguard_worker_batch_seconds_count", None)] >= 1


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8")


async def test_two_workers_rebalance_midway(broker: Broker, workers: list[WorkerProcess], tmp_path: Path):
    settings, collector, sink = await setup(broker, tmp_path)
    convs = conversations(n_synthetic=16, turns=8)
    expected = expected_flags(convs, build_scorer())
    events = list(interleaved_turn_events(convs))
    half = len(events) // 2
    w1 = WorkerProcess("w1", settings, tmp_path, CLASSIFIERS).start()
    workers.append(w1)
    try:
        await w1.ready()
        await publish(sink, events[:half], pause_every=4)
        w2 = WorkerProcess("w2", settings, tmp_path, CLASSIFIERS).start()
        workers.append(w2)
        # Keep publishing while w2 joins: the group rebalances under traffic.
        await asyncio.gather(publish(sink, events[half:], pause_every=2), w2.ready(60))
        await collector.wait_for(
            lambda: sentinels(convs) <= set(flags_by_response(collector)), 60, "sentinels"
        )
    finally:
        await sink.aclose()
        await collector.aclose()
    assert not collector.of_kind("turn_error"), collector.of_kind("turn_error")[:3]
    assert_flags_match(flags_by_response(collector), expected)
    # w1 went through a second assignment (it gave partitions to w2)
    assert w1.log().count("Executing _on_partitions_assigned") >= 2


async def test_killed_worker_partitions_recovered(
    broker: Broker, workers: list[WorkerProcess], tmp_path: Path
):
    # A session long enough that a worker busy scoring on a loaded machine keeps its
    # partitions until it is killed (at 2 s, w2 could drop out before: nothing to recover).
    settings, collector, sink = await setup(broker, tmp_path, session_timeout_s=6.0, heartbeat_interval_s=0.5)
    convs = conversations(n_synthetic=16, turns=8)
    expected = expected_flags(convs, build_scorer())
    events = list(interleaved_turn_events(convs))
    # Cut after turn 4 of every conversation: their state is then in both workers.
    cut = sum(min(len(c.turns), 4) for c in convs)
    w1 = WorkerProcess("w1", settings, tmp_path, CLASSIFIERS).start()
    w2 = WorkerProcess("w2", settings, tmp_path, CLASSIFIERS).start()
    workers += [w1, w2]
    try:
        await asyncio.gather(w1.ready(), w2.ready())
        # both in the group: each has had an assignment with partitions after the join
        await asyncio.gather(
            w1.wait_for_log("Executing _on_partitions_assigned"),
            w2.wait_for_log("Executing _on_partitions_assigned"),
        )
        await publish(sink, events[:cut])
        early = {rid for rid in expected if int(rid.rsplit("#", 1)[1]) < 4}
        await collector.wait_for(lambda: early <= set(flags_by_response(collector)), 60, "first-half flags")
        w2.kill()  # SIGKILL: no commit, no goodbye; w1 must recover its partitions
        await publish(sink, events[cut:], pause_every=4)
        await collector.wait_for(
            lambda: sentinels(convs) <= set(flags_by_response(collector)), 90, "sentinels"
        )
    finally:
        await sink.aclose()
        await collector.aclose()
    assert not collector.of_kind("turn_error"), collector.of_kind("turn_error")[:3]
    assert_flags_match(flags_by_response(collector), expected)
    assert "Recovery complete" in w1.log()


async def test_seek_to_committed_returns_to_the_start_of_unconsumed_turns(broker: Broker, tmp_path: Path):
    settings = test_settings(broker.url, tmp_path)
    await ensure_topics(settings)
    at_zero, uncommitted, at_two = (TopicPartition(settings.turns_topic, p) for p in range(3))
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers)
    await producer.start()
    try:
        for tp in (at_zero, uncommitted, at_two):
            for _ in range(5):
                await producer.send_and_wait(tp.topic, b"turn", partition=tp.partition)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id="seek-test",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=20,
    )
    tps = (at_zero, uncommitted, at_two)

    async def positions() -> list[int]:
        return [await consumer.position(tp) for tp in tps]

    async def fetch_all() -> None:
        for _ in range(50):
            await consumer.getmany(timeout_ms=100)
            if await positions() == [5, 5, 5]:
                return
        raise AssertionError(f"positions {await positions()} after fetching")

    await consumer.start()
    try:
        consumer.assign(list(tps))
        await consumer.commit({at_zero: 0, at_two: 2})
        # aiokafka alone leaves a partition committed at 0, or not at all, where the
        # fetch left it: turns fetched there and dropped by faust during a rebalance
        # would never be seen again.
        await fetch_all()
        assert await consumer.seek_to_committed() == {at_zero: 0, uncommitted: None, at_two: 2}
        assert await positions() == [5, 5, 2]
        await fetch_all()
        assert await seek_to_committed(consumer, {settings.turns_topic}) == {
            at_zero: 0,
            uncommitted: None,
            at_two: 2,
        }
        assert await positions() == [0, 0, 2]
        # Uncommitted partitions of other topics (faust's changelogs) are left alone.
        await fetch_all()
        await seek_to_committed(consumer)
        assert await positions() == [0, 5, 2]
    finally:
        await consumer.stop()

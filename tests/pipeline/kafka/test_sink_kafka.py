"""The publisher and the flag subscriber against a real broker, including its death."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from deltaguard.errors import SinkFull
from deltaguard.events import BillingEvent, FlagEvent
from deltaguard.kafka.sink import KafkaEventSink
from deltaguard.kafka.subscriber import FlagSubscriber
from deltaguard.kafka.topics import ensure_topics
from tests.pipeline.kafka.conftest import Broker, Collector, free_port, tansu_binary, test_settings

pytestmark = pytest.mark.kafka


def billing(i: int, conv: str = "") -> BillingEvent:
    return BillingEvent.build(
        conversation_id=conv or f"conv-{i % 7}",
        response_id=f"resp-{i}",
        input_tokens=i,
        cached_input_tokens=0,
        output_tokens=1,
        classifier_ms=0.5,
    )


def flag(i: int, tenant: str = "default", decision: str = "flag", category: str = "pii") -> FlagEvent:
    return FlagEvent.build(
        conversation_id=f"conv-{i % 7}",
        response_id=f"resp-{i}",
        lane="gate",
        decision=decision,
        categories=[category],
        scores={category: 0.9},
        classifier_versions={"pii": "1"},
        tenant=tenant,
    )


async def test_broker_restart_loses_no_billing_or_flag_event(broker: Broker, tmp_path: Path):
    settings = test_settings(broker.url, tmp_path, request_timeout_s=1.5)
    await ensure_topics(settings)
    collector = await Collector(settings, [settings.flags_topic, settings.billing_topic]).start()
    acked: set[str] = set()
    sink = KafkaEventSink(settings, on_delivered=acked.update)
    await sink.start()
    published: list[str] = []
    stop = asyncio.Event()
    running = asyncio.Event()
    running.set()

    async def publisher() -> None:
        i = 0
        while not stop.is_set():
            await running.wait()
            event = billing(i) if i % 2 else flag(i)
            await sink.send([event])  # never waits for the broker, up or down
            published.append(event.event_id)
            i += 1
            await asyncio.sleep(0.003)

    task = asyncio.create_task(publisher())
    try:
        await collector.wait_for(lambda: len(collector.values) >= 200, 30, "traffic before the kill")
        # Kill only when nothing is in flight and every acknowledged event has been read:
        # memory storage would otherwise take acknowledged events with it, which no
        # publisher can prevent (a real cluster keeps them on its replicas).
        # Hold the publisher for a moment: nothing in flight, all acknowledged events read.
        running.clear()
        await collector.wait_for(
            lambda: sink.stats["queued"] == 0 and acked <= set(collector.values), 10, "a quiet moment"
        )
        broker.kill()
        running.set()  # and it publishes on through the outage
        kill_at = len(published)
        await asyncio.sleep(3.0)  # the publisher keeps going; deliveries time out; spooling
        assert sink.stats["outage"] and sink.stats["spool_records"] > 0
        broker.start()  # same port, empty: the sink recreates its topics on reconnect
        await collector.restart()
        # Publish on until the sink is connected again (on a loaded machine the reconnect
        # backoff can take seconds), then let it drain its spool on its own; a sink that
        # gets to neither fails here, by name.

        async def until(predicate: Callable[[], bool], what: str) -> None:
            try:
                await collector.wait_for(predicate, 30, what)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; stats {sink.stats}") from None

        await until(lambda: not sink.stats["outage"], "the sink back from the outage")
        stop.set()
        await task
        await until(
            lambda: sink.stats["spool_records"] == 0 and sink.stats["queued"] == 0,
            "the sink to drain its spool",
        )
        await sink.aclose()
        want = set(published)
        try:
            await collector.wait_for(lambda: want <= set(collector.values), 30, "every published event")
        except AssertionError:
            missing = want - set(collector.values)
            idx = sorted(published.index(m) for m in missing)
            raise AssertionError(
                f"{len(missing)} missing (positions {idx[:10]}...{idx[-3:]}), {len(missing & acked)} acked; "
                f"stats {sink.stats}; kill at {kill_at}, published {len(published)}"
            ) from None
    finally:
        stop.set()
        await sink.aclose()
        await collector.aclose()
    assert sink.outages >= 1 and sink.spooled > 0
    assert set(collector.values) == set(published)  # none lost, none invented
    assert not (tmp_path / "spool.jsonl").read_bytes()  # drained


async def test_close_rides_out_a_broker_that_goes_out_during_the_flush(broker: Broker, tmp_path: Path):
    settings = test_settings(broker.url, tmp_path, request_timeout_s=1.0, close_timeout_s=20.0)
    await ensure_topics(settings)
    sink = KafkaEventSink(settings)
    collector = Collector(settings, [settings.billing_topic])
    try:
        await sink.send([billing(0)])
        for _ in range(200):
            if sink.delivered:
                break
            await asyncio.sleep(0.05)
        broker.kill()
        events = [billing(i) for i in range(1, 51)]
        await sink.send(events)  # in memory: the sink has not seen the outage yet
        assert not sink.stats["outage"]
        closing = asyncio.create_task(sink.aclose())
        for _ in range(200):  # its flush fails and the delivery task enters the outage
            if sink.stats.get("outage"):
                break
            await asyncio.sleep(0.05)
        assert sink.stats["outage"] and not closing.done()
        broker.start()  # back, empty, within the close timeout: the flush goes on
        await asyncio.wait_for(closing, 25)
        await collector.start()
        want = {e.event_id for e in events}
        await collector.wait_for(lambda: want <= set(collector.values), 20, "the events flushed at close")
    finally:
        await sink.aclose()
        await collector.aclose()
    assert sink.outages == 1
    assert not (tmp_path / "spool.jsonl").read_bytes()  # delivered, not left in the spool


async def test_spool_full_raises_sinkfull_then_resends_in_order(tmp_path: Path):
    port = free_port()  # nothing listens here yet
    settings = test_settings(
        f"kafka://127.0.0.1:{port}",
        tmp_path,
        spool_max_bytes=4096,
        publish_queue_size=1,
        request_timeout_s=1.0,
    )
    sink = KafkaEventSink(settings)
    await sink.start()
    accepted = []
    with pytest.raises(SinkFull, match=r"spool .* is full"):
        for i in range(1000):
            event = billing(i, conv="one-conversation")
            await sink.send([event])
            accepted.append(event.event_id)
    assert 5 < len(accepted) < 100
    stats = sink.stats
    assert stats["spool_records"] + stats["queued"] == len(accepted)
    await sink.aclose()  # broker still down: what memory held goes to the spool

    broker = Broker(tansu_binary(), port, tmp_path / "tansu.log")
    broker.start()
    try:
        sink = KafkaEventSink(settings)
        await sink.start()  # finds the spool of the previous run and re-sends it
        for _ in range(200):
            if sink.stats["delivered"] == len(accepted):
                break
            await asyncio.sleep(0.05)
        await sink.aclose()
        assert sink.delivered == len(accepted)
        # one conversation -> one partition: the order there is the publishing order
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            await consumer.topics()
            tps = [
                TopicPartition(settings.billing_topic, p)
                for p in consumer.partitions_for_topic("deltaguard.billing")
            ]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ids: list[str] = []
            for _ in range(50):
                batch = await consumer.getmany(timeout_ms=100)
                ids += [json.loads(m.value)["event_id"] for msgs in batch.values() for m in msgs]
                if len(ids) >= len(accepted):
                    break
        finally:
            await consumer.stop()
        assert list(dict.fromkeys(ids)) == accepted
    finally:
        broker.kill()


async def test_flag_subscriber_calls_back_once_per_event(broker: Broker, tmp_path: Path):
    settings = test_settings(broker.url, tmp_path, subscriber_offset_reset="latest")
    await ensure_topics(settings)
    sink = KafkaEventSink(settings)
    await sink.send([flag(1)])  # before the subscriber started: not for it
    await asyncio.sleep(0.5)
    calls: list[tuple[str, list[str], str]] = []

    async def mark_flagged(conversation_id: str, categories: list[str], tenant: str) -> None:
        calls.append((conversation_id, list(categories), tenant))

    subscriber = FlagSubscriber(settings, mark_flagged)
    await subscriber.start()
    try:
        await subscriber.ready(10)
        # A duplicate, as a retry would make; the tenant travels with the flag; an alert
        # (decision "flag", Policy.monitor_blocking) blocks nothing, so it calls nothing.
        blocks = {"decision": "block", "category": "prompt_injection"}
        await sink.send([flag(2, **blocks), flag(3, tenant="tenant-a", **blocks), flag(2, **blocks), flag(4)])
        for _ in range(100):
            if len(calls) >= 2 and subscriber.received >= 3:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
    finally:
        await sink.aclose()
        await subscriber.aclose()
    # Partitions: no global order.
    assert sorted(calls) == [
        ("conv-2", ["prompt_injection"], "default"),
        ("conv-3", ["prompt_injection"], "tenant-a"),
    ]
    assert subscriber.duplicates == 1 and subscriber.received == 3  # the alert was read, and skipped

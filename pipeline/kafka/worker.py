"""The distributed monitor lane: a faust-streaming worker over the turns topic.

    deltaguard worker --broker kafka://HOST:PORT [--classifiers secrets,pii]

`build_worker_app(settings, scorer)` builds the faust app (nothing happens at import):

- one agent consumes `turns_topic` (key: conversation id) in batches
  (`stream.take_events(batch_size, within=batch_within_s)`),
- one changelog-backed Table, `conversations`, holds each conversation's state
  (monitor.py: a bounded map of recent response id -> classifier snapshot). Turns are
  keyed by conversation id, so each turns partition, and its conversations' state, is
  owned by exactly one worker; the changelog has as many partitions as the turns topic,
  and the worker that takes over turns partition N recovers changelog partition N,
- flags go to `flags_topic`, turns that cannot be scored to `errors_topic`, and the
  verdict of each turn a gateway holds (`verdict_requested`) to `verdicts_topic`,
- with `web_enabled`, `GET /metrics` on 127.0.0.1:`web_port` serves Prometheus metrics
  (`WorkerMetrics`: turns by outcome, conversations held, batch and scoring latency).

Per batch, in this order, which is what makes redelivery safe (at least once):

1. score the batch in a thread (pure: table values in, new values + events out);
2. publish the flag, error and verdict events and wait for the broker's acknowledgement;
3. write the new table values (their changelog records go out after the events);
4. faust acknowledges the batch; offsets are committed later, after a producer flush.

A worker that dies between 2 and 4 leaves its turns uncommitted: the next owner
recovers the table and gets them again. Turns whose state was written are recognised by
response id and skipped (their flags went out in step 2); the others are scored again
from the same snapshots, giving the same events with the same ids.

Three patches of faust and aiokafka live here:

- `ConversationTable` can be written from a batch: faust's Table takes the changelog
  partition from the "current event", which `take()` batches do not set
  (faust-streaming issue #497); the agent names the partition explicitly.
- `_ConsumerThread` sets the consumer's fetch wait from the settings instead of
  faust's hard-coded 1500 ms (a broker that answers waiting fetches late costs that
  much per hop; docs/kafka.md),
- and, after a rebalance, seeks every partition back to its committed offset (or a
  turns partition without one to its start) in one step (`seek_to_committed`):
  aiokafka's own seek skips offset 0 and races the fetcher, and the turns fetched
  during the rebalance would be skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import aiokafka
import faust
from aiokafka import TopicPartition
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from faust.types import TP
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from deltaguard.kafka.monitor import IncomingTurn, MonitorLane, expired
from deltaguard.kafka.records import decode_key, encode_json, encode_key
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.state.scoring import Scorer

log = logging.getLogger("deltaguard.kafka.worker")
EXPOSITION_TYPE = "text/plain; version=0.0.4"

# -- faust patches ----------------------------------------------------------------------


def set_fetch_max_wait(consumer: aiokafka.AIOKafkaConsumer, ms: int) -> None:
    """Set an aiokafka consumer's fetch wait before it starts.

    aiokafka reads `_fetch_max_wait_ms` when `start()` builds its fetcher; faust passes
    a constant to the constructor and offers no setting, so this is the only way in.
    """
    if not hasattr(consumer, "_fetch_max_wait_ms"):
        raise RuntimeError(
            f"aiokafka {aiokafka.__version__} has no _fetch_max_wait_ms: update pipeline/kafka/worker.py"
        )
    consumer._fetch_max_wait_ms = ms


async def seek_to_committed(
    consumer: aiokafka.AIOKafkaConsumer, from_start: Collection[str] = ()
) -> dict[TopicPartition, int | None]:
    """Seek every assigned partition to its committed offset, all at once at the end.

    After a rebalance faust drops the messages it fetched while its flow was stopped,
    and counts on this seek to fetch them again. aiokafka's own `seek_to_committed`
    misses some: it seeks only to offsets above 0 (`if offset and offset > 0`), and it
    seeks each partition as soon as its offset is read, so an early partition's
    messages can be fetched and dropped again, after its seek, while later offsets are
    being read. Either way the partition's next owner skipped those turns and waited at
    the end of the log. Here the offsets are read first and every seek is made after the last
    await. A partition of a `from_start` topic without a committed offset (a fresh
    group, or an owner that died before its first commit) goes to its beginning, as the
    worker's `earliest` reset policy would put it; other uncommitted partitions (faust's
    changelogs) are left alone, as aiokafka leaves them.
    """
    committed: dict[TopicPartition, int | None] = {}
    for tp in consumer.assignment():
        committed[tp] = await consumer.committed(tp)
    fresh = [tp for tp, offset in committed.items() if offset is None and tp.topic in from_start]
    starts = await consumer.beginning_offsets(fresh) if fresh else {}
    # No await from here on: nothing is fetched between two of these seeks.
    for tp, offset in committed.items():
        target = offset if offset is not None else starts.get(tp)
        if target is not None:
            consumer.seek(tp, target)
    log.debug(
        "sought to committed offsets: %s", {f"{t.topic}:{t.partition}": committed[t] for t in committed}
    )
    return committed


class _ConsumerThread(AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        set_fetch_max_wait(consumer, self.app.fetch_max_wait_ms)  # type: ignore[attr-defined]
        return consumer

    async def seek_to_committed(self) -> Mapping[TP, int]:
        return await self.call_thread(self._seek_to_committed)

    async def _seek_to_committed(self) -> Mapping[TP, int]:
        consumer = self._ensure_consumer()
        return await seek_to_committed(consumer, self.app.seek_from_start)  # type: ignore[attr-defined,return-value]


class _Consumer(AIOKafkaConsumer):
    def _new_consumer_thread(self) -> AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(AIOKafkaTransport):
    Consumer = _Consumer


class WorkerApp(faust.App):
    """faust.App whose consumer's fetch wait is `fetch_max_wait_ms` (not 1500 ms), and
    whose seek after a rebalance is `seek_to_committed`."""

    fetch_max_wait_ms: int = 1500
    seek_from_start: frozenset[str] = frozenset()  # topics whose uncommitted partitions restart

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)


_write_partition: ContextVar[int | None] = ContextVar("deltaguard_write_partition", default=None)


class ConversationTable(faust.Table):
    """A Table written with an explicit changelog partition (see module docstring)."""

    def partition_for_key(self, key: Any) -> int | None:
        partition = _write_partition.get()
        if partition is not None:
            return partition
        return super().partition_for_key(key)

    @contextlib.contextmanager
    def _partition(self, partition: int) -> Iterator[None]:
        token = _write_partition.set(partition)
        try:
            yield
        finally:
            _write_partition.reset(token)

    def write(self, key: str, value: str, partition: int) -> None:
        with self._partition(partition):
            self[key] = value

    def remove(self, key: str, partition: int) -> None:
        with self._partition(partition):
            del self[key]


# -- the app ----------------------------------------------------------------------------


class MonitorWorker:
    """What the agent does with each batch; holds the app's topics, table and thread."""

    def __init__(self, app: WorkerApp, settings: KafkaSettings, lane: MonitorLane) -> None:
        self.app = app
        self.settings = settings
        self.lane = lane
        self.turns = app.topic(
            settings.turns_topic,
            partitions=settings.turns_partitions,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.flags = app.topic(settings.flags_topic, key_serializer="raw", value_serializer="raw")
        self.errors = app.topic(settings.errors_topic, key_serializer="raw", value_serializer="raw")
        self.verdicts = app.topic(settings.verdicts_topic, key_serializer="raw", value_serializer="raw")
        self.table = app.tables.add(
            ConversationTable(
                app,
                name=settings.table_name,
                default=None,
                beacon=app.tables.beacon,
                partitions=settings.turns_partitions,
                # Values are JSON text we encode ourselves: live and recovered reads
                # then parse the same bytes (monitor.ConversationEntry).
                schema=faust.Schema(key_serializer="json", value_serializer="raw"),
                help="conversation id -> recent classifier snapshots (JSON)",
            )
        )
        # The one thread classifier folds run on: off the event loop, created once.
        self.executor = ThreadPoolExecutor(
            settings.inference_threads, thread_name_prefix="deltaguard-monitor"
        )
        self.scored = 0
        self.flagged = 0
        self.errored = 0
        self.duplicates = 0
        self.verdicts_sent = 0
        self._logged = (0, 0, 0, 0, 0)
        # Only when served: a worker without a web port keeps just its plain counters.
        self.metrics = WorkerMetrics(self) if settings.web_enabled else None

    async def process(self, events: Sequence[Any]) -> None:
        with self._timed("batch_seconds"):
            await self._process(events)

    def _timed(self, histogram: str) -> contextlib.AbstractContextManager[Any]:
        return getattr(self.metrics, histogram).time() if self.metrics else contextlib.nullcontext()

    async def _process(self, events: Sequence[Any]) -> None:
        turns = [
            IncomingTurn(
                partition=e.message.partition,
                offset=e.message.offset,
                key=e.message.key,
                value=e.message.value,
                topic=e.message.topic,
            )
            for e in events
        ]
        if log.isEnabledFor(logging.DEBUG):
            offsets = " ".join(f"{t.partition}@{t.offset}" for t in turns)
            log.debug("batch of %d turns (partition@offset): %s", len(turns), offsets)
        convs = {decode_key(t.key) for t in turns} - {None}
        values = {conv: self.table.get(conv) for conv in convs}
        loop = asyncio.get_running_loop()
        with self._timed("score_seconds"):
            result = await loop.run_in_executor(self.executor, self.lane.score_batch, values, turns)
        pending = []
        for outcome in result.outcomes:
            if outcome.duplicate:
                self.duplicates += 1
            elif outcome.error is not None:
                self.errored += 1
            else:
                self.scored += 1
            self.flagged += outcome.flag is not None
            self.verdicts_sent += outcome.verdict is not None
            for topic, record in (
                (self.flags, outcome.flag),
                (self.errors, outcome.error),
                (self.verdicts, outcome.verdict),
            ):
                if record is not None:
                    pending.append(
                        await topic.send(
                            key=encode_key(record.conversation_id),
                            value=encode_json(record.model_dump(mode="json")),
                            force=True,  # now, never held back until the offset commit
                        )
                    )
        # Events first, then state: a state written means its events were delivered.
        await asyncio.gather(*pending)
        for conv, (partition, value) in result.writes.items():
            self.table.write(conv, value, partition)

    def log_stats(self) -> None:
        counts = (self.scored, self.flagged, self.errored, self.duplicates, self.verdicts_sent)
        if counts != self._logged:
            log.info("turns scored %d, flagged %d, errors %d, redelivered %d, verdicts sent %d", *counts)
            self._logged = counts

    def sweep(self, now: float) -> int:
        """Drop conversations idle for longer than `conversation_ttl_s` (owned ones only)."""
        if self.app.rebalancing:
            return 0
        owned = {
            tp.partition for tp in self.app.consumer.assignment() if tp.topic == self.settings.turns_topic
        }
        doomed = []
        for key, raw in list(self.table.items()):
            partition = expired(raw, now, self.settings.conversation_ttl_s) if raw is not None else None
            if partition is not None and partition in owned:
                doomed.append((key, partition))
        for key, partition in doomed:
            self.table.remove(key, partition)
        if doomed:
            log.info("dropped %d idle conversations", len(doomed))
        return len(doomed)


class WorkerMetrics(Collector):
    """One worker's Prometheus metrics (`GET /metrics` on its web port, 127.0.0.1).

    The turn counters are read from the worker at scrape time (the same numbers its log
    reports); batch and scoring latency are histograms.
    """

    def __init__(self, worker: MonitorWorker) -> None:
        self.worker = worker
        # No auto-describe: collecting reads the table, which must not be touched before
        # the app has started.
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.batch_seconds = Histogram(
            "deltaguard_worker_batch_seconds",
            "Per batch of turns: score, publish the events, write the state",
            registry=self.registry,
        )
        self.score_seconds = Histogram(
            "deltaguard_worker_score_seconds",
            "Per batch of turns: classifier folds only",
            registry=self.registry,
        )

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        w = self.worker
        turns = CounterMetricFamily("deltaguard_worker_turns", "Turn events by outcome", labels=["outcome"])
        for outcome, n in (
            ("scored", w.scored),
            ("flagged", w.flagged),
            ("error", w.errored),
            ("redelivered", w.duplicates),
        ):
            turns.add_metric([outcome], n)
        yield turns
        yield CounterMetricFamily(
            "deltaguard_worker_verdicts",
            "Verdict events sent, one per turn a gateway holds (verdict_requested)",
            value=w.verdicts_sent,
        )
        yield GaugeMetricFamily(
            "deltaguard_worker_conversations",
            "Conversations whose state this worker holds",
            value=len(w.table),
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def faust_options(settings: KafkaSettings) -> dict[str, Any]:
    """faust settings derived from ours (one place, so tests can check them)."""
    options: dict[str, Any] = {
        "broker": settings.broker,
        "store": "memory://",
        "datadir": str(settings.data_dir or Path(tempfile.mkdtemp(prefix="deltaguard-worker-"))),
        "autodiscover": False,
        # Topics are created by ensure_topics with the partition counts of the settings.
        "topic_allow_declare": False,
        "topic_disable_leader": True,
        "consumer_auto_offset_reset": "earliest",
        "broker_client_id": f"{settings.client_id}-worker",
        "broker_session_timeout": settings.session_timeout_s,
        "broker_heartbeat_interval": settings.heartbeat_interval_s,
        "broker_commit_interval": settings.commit_interval_s,
        "broker_request_timeout": max(settings.request_timeout_s, settings.session_timeout_s + 1.0),
        "stream_buffer_maxsize": settings.stream_buffer_maxsize,
        "stream_publish_on_commit": False,
        # A revoked partition's batch finishes (events and state written) before the
        # partition moves: the next owner never races a late write of the last one.
        "stream_wait_empty": True,
        "producer_acks": -1,
        "web_enabled": settings.web_enabled,
        "web_bind": "127.0.0.1",
        "web_host": "127.0.0.1",
        "web_port": settings.web_port,
    }
    if settings.producer_max_batch_size is not None:
        options["producer_max_batch_size"] = settings.producer_max_batch_size
    return options


def build_worker_app(settings: KafkaSettings, scorer: Scorer) -> tuple[WorkerApp, MonitorWorker]:
    """The faust app of one worker process, and its `MonitorWorker` (for stats, tests)."""
    app = WorkerApp(settings.app_id, **faust_options(settings))
    app.fetch_max_wait_ms = settings.fetch_max_wait_ms
    app.seek_from_start = frozenset({settings.turns_topic})
    lane = MonitorLane(
        scorer,
        max_responses=settings.max_responses_per_conversation,
        max_seen=settings.max_seen_per_conversation,
    )
    worker = MonitorWorker(app, settings, lane)

    @app.agent(worker.turns, name="deltaguard-monitor")
    async def monitor(stream: faust.StreamT) -> None:
        async for events in stream.take_events(settings.batch_size, within=settings.batch_within_s):
            await worker.process(events)

    if settings.web_enabled:

        @app.page("/metrics")
        async def metrics(web: Any, request: Any) -> Any:
            # aiohttp takes the charset apart: the exposition format's type without it.
            assert worker.metrics is not None  # made whenever the web server is
            return web.bytes(worker.metrics.exposition(), content_type=EXPOSITION_TYPE)

    @app.timer(settings.sweep_interval_s)
    async def sweep() -> None:
        worker.sweep(time.time())

    @app.timer(settings.stats_interval_s)
    async def stats() -> None:
        worker.log_stats()

    return app, worker


def run_worker(
    settings: KafkaSettings,
    classifier_names: Sequence[str],
    loglevel: str = "info",
    vouch: Sequence[str] = (),
) -> int:
    """Run one worker until SIGTERM/SIGINT (blocks; exits the process like faust does).
    `vouch`: the paths the gateway vouches for (serve --vouch), so both judge alike."""
    from deltaguard.kafka.topics import ensure_topics
    from deltaguard.state.loading import build_scorer

    scorer = build_scorer(names=tuple(classifier_names), vouch=vouch)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    if settings.create_topics:
        loop.run_until_complete(ensure_topics(settings))
    app, worker = build_worker_app(settings, scorer)
    log.info(
        "monitor worker: classifiers %s, turns %s (%d partitions), fetch wait %d ms",
        ",".join(scorer.versions),
        settings.turns_topic,
        settings.turns_partitions,
        settings.fetch_max_wait_ms,
    )
    try:
        faust.Worker(app, loop=loop, loglevel=loglevel, redirect_stdouts=False).execute_from_commandline()
    finally:
        worker.executor.shutdown(wait=False, cancel_futures=True)
    return 0

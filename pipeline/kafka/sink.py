"""`KafkaEventSink`: the gateway's publisher, an `EventSink` that never waits on the broker.

    sink = KafkaEventSink(settings)
    await sink.start()                 # optional: send() starts it too
    await sink.send([billing_event])   # returns at once, broker up or down
    await sink.aclose()                # flush, or spool what cannot be flushed

Every event goes to the topic of its kind (turns, flags, billing), keyed by
conversation id. One background task owns the aiokafka producer and a FIFO made of
three parts, oldest first:

    stranded (memory) -> queue (memory, bounded) -> spool (file, bounded bytes)

(the memory parts are `held.HeldRecords`, the file `spool.Spool`).

`send()` puts events in the queue, or appends them to the spool when the spool is not
empty (to keep the order), when the queue is full, or while the broker is out. When a
delivery fails, the task marks an outage, moves what memory holds to the front of the
spool (a crash then loses nothing that was waiting), reconnects with backoff (re-creating
the topics if the broker came back empty), and re-sends the spool in order.

`spool_max_bytes` bounds everything pending, memory included: the spool keeps room for
what memory holds, so spilling it at an outage or at shutdown always fits. When an
event does not fit, `send()` raises `SinkFull` and accepts none of its events: that is
the only way the caller learns of an outage, and it is never made to wait for one.
(Behind `SinkWriter`, a `SinkFull` is retried with backoff: the writer's bounded queue
then applies backpressure.) What sits in memory, up to `publish_queue_size` events, is
lost if the process is killed; with the broker up it is in flight for milliseconds.

Delivery is at least once: records whose acknowledgement was not seen are sent again,
so consumers drop duplicates by `event_id` (stable across retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from deltaguard.errors import BrokerUnavailable, LaneClosed, SinkFull
from deltaguard.events import Event
from deltaguard.kafka.boundary import broker_errors
from deltaguard.kafka.held import HeldRecords, spool_bytes
from deltaguard.kafka.records import OutboundRecord
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.kafka.spool import Spool
from deltaguard.kafka.topics import ensure_topics
from deltaguard.worker import Backoff, Lifecycle

log = logging.getLogger("deltaguard.kafka.sink")

_SPOOL_CHUNK = 500  # records re-sent per round trip when draining the spool


class KafkaEventSink:
    """Publishes DeltaGuard events to Kafka; spools to disk while the broker is out.

    `on_delivered` is called with the event ids the broker acknowledged (for metrics
    and tests); it runs on the event loop and must be quick.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        on_delivered: Callable[[Sequence[str]], None] | None = None,
    ) -> None:
        self.settings = settings
        self.on_delivered = on_delivered
        self._state = Lifecycle.NEW
        self.delivered = 0  # records acknowledged by the broker
        self.spooled = 0  # records that went through the spool
        self.outages = 0

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Open the spool and start the delivery task; never waits for the broker."""
        if self._state is Lifecycle.RUNNING:
            return
        if self._state is not Lifecycle.NEW:
            raise LaneClosed(f"KafkaEventSink.start() called when {self._state.value}")
        self.spool_ = Spool(
            self.settings.spool_path, self.settings.spool_max_bytes, self.settings.spool_fsync
        )
        self.spool_.open()
        self._held = HeldRecords()
        self._wakeup = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        # Until the first connection attempt fails, events wait in memory: a refused
        # connection fails fast, and then the outage path spools them.
        self._outage = False
        self._connected = False
        self._task = asyncio.create_task(self._run(), name="kafka-sink")
        self._state = self._state.to(Lifecycle.RUNNING, "kafka sink")

    async def send(self, events: Sequence[Event]) -> None:
        """Accept events for delivery; returns without waiting for the broker.

        Raises `SinkFull` when they would have to be spooled and the spool is full
        (nothing of `events` is accepted then), `LaneClosed` after `aclose()`.
        """
        if self._state is Lifecycle.NEW:
            await self.start()
        if self._state is not Lifecycle.RUNNING:
            raise LaneClosed(f"kafka sink is {self._state.value}; {len(events)} events not accepted")
        records = [OutboundRecord.of(e, self.settings) for e in events]
        if not records:
            return
        held = self._held
        room = self.settings.publish_queue_size - len(held.queue)
        if self._outage or self.spool_ or room < len(records):
            # Room stays reserved for what memory holds: an outage spills it here.
            self.spool_.append(records, reserve=held.nbytes)
            self.spooled += len(records)
        else:
            size = spool_bytes(records)
            if self.spool_.pending_bytes + held.nbytes + size > self.spool_.max_bytes:
                raise SinkFull(
                    f"kafka sink: {len(records)} events would not fit the spool {self.spool_.path} "
                    f"if the broker went out ({held.nbytes} bytes already held in memory)"
                )
            held.put(records, size)
        self._wakeup.set()

    async def aclose(self) -> None:
        """Deliver what is pending within `close_timeout_s`; spool the rest for the next start.

        Returns at once when the broker is out at the call; a broker that goes out during
        the flush holds the shutdown up to `close_timeout_s`. Loses no accepted event: the
        spool always has room for what memory holds."""
        if self._state in (Lifecycle.CLOSING, Lifecycle.CLOSED):
            return
        if self._state is Lifecycle.NEW:
            self._state = self._state.to(Lifecycle.CLOSED, "kafka sink")
            return
        self._state = self._state.to(Lifecycle.CLOSING, "kafka sink")
        deadline = time.monotonic() + self.settings.close_timeout_s
        # With the broker already out, memory goes to the spool at once (below) and waits
        # there for the next start. Otherwise flush until the deadline: a delivery that
        # fails during the flush (a blip, a slow broker) is retried by the delivery task
        # as usual, rather than ending the flush with everything left spooled.
        try:
            if not self._outage:
                while (self._held or self.spool_) and time.monotonic() < deadline:
                    self._wakeup.set()
                    await asyncio.sleep(0.01)
        finally:  # even when the flush fails or the caller is cancelled: spool, then close
            self._task.cancel()
            await asyncio.wait({self._task})  # (never swallows the caller's own cancellation)
            self._spool_memory()
            await self._stop_producer()
            self.spool_.close()
            self._state = self._state.to(Lifecycle.CLOSED, "kafka sink")

    def _spool_memory(self) -> None:
        """At shutdown: what memory holds goes to the front of the spool."""
        left = self._held.take_all()
        if left:
            try:
                self.spool_.prepend(left)
                self.spooled += len(left)
                log.warning("kafka sink closed with %d events spooled to %s", len(left), self.spool_.path)
            except Exception:
                log.exception(
                    "kafka sink: %d events could not be spooled at shutdown and are lost", len(left)
                )
        if self.spool_:
            log.warning(
                "kafka sink: %d spooled events wait in %s for the next start",
                self.spool_.pending_records,
                self.spool_.path,
            )

    @property
    def stats(self) -> dict[str, int | bool]:
        if self._state is Lifecycle.NEW:
            return {}
        return {
            "queued": len(self._held),
            "spool_records": self.spool_.pending_records,
            "spool_bytes": self.spool_.pending_bytes,
            "delivered": self.delivered,
            "spooled": self.spooled,
            "outages": self.outages,
            "outage": self._outage,
        }

    # -- delivery task ----------------------------------------------------------------

    async def _run(self) -> None:
        backoff = Backoff(self.settings.reconnect_initial_s, self.settings.reconnect_max_s)
        while True:
            try:
                if not self._connected:
                    await self._connect()
                    backoff.reset()
                if self._held.unsent:
                    await self._send_memory()
                elif self.spool_:
                    await self._send_spool()
                else:
                    self._wakeup.clear()
                    await self._wakeup.wait()
            except asyncio.CancelledError:
                raise
            except BrokerUnavailable as exc:
                self._enter_outage(exc)
                await backoff.sleep()
            except Exception as exc:  # a bug, not an outage: keep the events, retry later
                log.exception("kafka sink delivery failed unexpectedly")
                self._enter_outage(exc)
                await backoff.sleep()

    def _enter_outage(self, exc: BaseException) -> None:
        if not self._outage:
            self.outages += 1
            log.warning("kafka broker out (%s); spooling to %s", exc, self.spool_.path)
        self._outage = True
        self._connected = False
        # Memory to the front of the spool: in order, and safe from a crash.
        memory = self._held.take_all()
        if memory:
            try:
                self.spool_.prepend(memory)
                self.spooled += len(memory)
            except Exception:
                # Spool full: keep them in memory, first in line for the next attempt.
                log.error("spool full: %d events stay in memory until the broker returns", len(memory))
                self._held.strand(memory)

    async def _connect(self) -> None:
        await self._stop_producer()
        self._producer = await start_producer(self.settings)
        self._connected = True
        if self._outage:
            log.info("kafka broker back; re-sending %d spooled events", self.spool_.pending_records)
        self._outage = False

    async def _stop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            # stop() flushes; against a dead broker that would wait a request timeout.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.stop(), 1.0)

    async def _deliver(self, records: Sequence[OutboundRecord]) -> tuple[int, BaseException | None]:
        """Send records pipelined: how many were acknowledged in order, and the first failure.

        Everything from the first failure on must be sent again (some of it may have
        arrived: duplicates, which event ids resolve), so that the order is kept.
        """
        producer = self._producer
        assert producer is not None
        futures = []
        failure: BaseException | None = None
        try:
            for r in records:
                futures.append(await producer.send(r.topic, r.value, key=r.key))
        except KafkaError as exc:
            failure = exc
        results = await asyncio.gather(*futures, return_exceptions=True)
        ok = 0
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
                break
            ok += 1
        if isinstance(failure, asyncio.CancelledError):
            raise failure
        if ok:
            self.delivered += ok
            if self.on_delivered is not None:
                self.on_delivered([r.event_id for r in records[:ok]])
        return ok, failure

    async def _send_memory(self) -> None:
        batch = self._held.next_batch(_SPOOL_CHUNK)
        ok, failure = await self._deliver(batch)
        self._held.settle(batch, ok)
        if failure is not None:
            raise delivery_failed(self.settings, failure)

    async def _send_spool(self) -> None:
        chunk = self.spool_.peek(_SPOOL_CHUNK)
        if not chunk:
            return
        ok, failure = await self._deliver([record for record, _ in chunk])
        if ok:
            self.spool_.commit(chunk[ok - 1][1])
        if failure is not None:
            raise delivery_failed(self.settings, failure)


async def start_producer(settings: KafkaSettings) -> AIOKafkaProducer:
    """A started producer for the publisher's topics (created first when
    `create_topics`: a broker that came back empty has none); `BrokerUnavailable` when
    the broker cannot be reached."""
    if settings.create_topics:
        mine = (settings.turns_topic, settings.flags_topic, settings.billing_topic)
        await ensure_topics(settings, {t: n for t, n in settings.topic_partitions().items() if t in mine})
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=f"{settings.client_id}-publisher",
        acks="all",
        linger_ms=settings.linger_ms,
        request_timeout_ms=int(settings.request_timeout_s * 1000),
        enable_idempotence=False,  # tansu has no idempotent producer; ids dedupe instead
        # The same batch limit as the workers' producer (tansu's offsets after
        # multi-record batches are wrong; docs/kafka.md).
        **(
            {"max_batch_size": settings.producer_max_batch_size}
            if settings.producer_max_batch_size is not None
            else {}
        ),
    )
    try:
        with broker_errors(settings.broker, "connect"):
            await producer.start()
    except BrokerUnavailable:
        with contextlib.suppress(Exception):
            await producer.stop()
        raise
    return producer


def delivery_failed(settings: KafkaSettings, failure: BaseException) -> BrokerUnavailable:
    """The outage a failed delivery means, caused by `failure`."""
    exc = BrokerUnavailable(settings.broker, f"delivery failed: {failure!r}")
    exc.__cause__ = failure
    return exc

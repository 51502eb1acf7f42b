"""`FlagSubscriber`: the gateway side of monitor-lane flags.

    subscriber = FlagSubscriber(settings, stage.mark_flagged)
    await subscriber.start()        # returns at once; connects in the background
    ...
    await subscriber.aclose()

Every gateway instance must see every flag (the next turn of a conversation may reach
any of them), so the subscriber joins no consumer group: it assigns itself all
partitions of the flags topic and starts at their end (`subscriber_offset_reset`);
flags from before it started concern state it does not have. A partition that lost its
offsets (a broker that came back empty) is re-read from its beginning. Duplicates
(at-least-once delivery, re-reads) are dropped by event id within a bounded window.

Given the gateway's `AwaitedVerdicts`, it reads the verdicts topic too, the same way,
and settles each turn this gateway holds with the worker's verdict on it (verdicts on
other gateways' turns are dropped). Both topics are created when missing (with
`create_topics`): a gateway may start before any worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError
from pydantic import ValidationError

from deltaguard.errors import KafkaPathError
from deltaguard.events import FlagEvent, VerdictEvent
from deltaguard.kafka.boundary import BROKER_FAILURES
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.kafka.topics import ensure_topics
from deltaguard.lanes.awaited_verdicts import AwaitedVerdicts, verdict_of
from deltaguard.worker import Backoff

log = logging.getLogger("deltaguard.kafka.subscriber")

FlagCallback = Callable[[str, Sequence[str], str], Awaitable[None] | None]
E = TypeVar("E", FlagEvent, VerdictEvent)


def awaited_verdicts(settings: KafkaSettings, hold: str, hold_timeout_s: float) -> AwaitedVerdicts | None:
    """Where a distributed gateway awaits its held turns' verdicts, with the deadline and
    fallback of `settings`; None when the gateway holds nothing (`hold` "off").

    Raises `KafkaPathError` when the deadline is not below the hold's own timeout
    (`hold_timeout_s`): that one releases whatever waits longer, so a "block" fallback
    would never apply."""
    if hold == "off":
        return None
    if settings.verdict_timeout_s >= hold_timeout_s:
        raise KafkaPathError(
            f"verdict_timeout_s ({settings.verdict_timeout_s:g} s) must be below release_hold_timeout_s "
            f"({hold_timeout_s:g} s), which releases whatever waits longer"
        )
    return AwaitedVerdicts(settings.verdict_timeout_s, settings.verdict_fallback)


class FlagSubscriber:
    """Calls `callback(conversation_id, categories, tenant)` for every new flag event that
    blocks (decision "block"; an alert blocks nothing).

    `callback` may be a function or a coroutine function; an exception it raises is
    logged and the next event is processed. `on_event`, when given, receives the whole
    `FlagEvent` first (audit, metrics). `verdicts`: the held turns to settle with the
    workers' verdicts (None: the verdicts topic is not read).
    """

    def __init__(
        self,
        settings: KafkaSettings,
        callback: FlagCallback,
        on_event: Callable[[FlagEvent], None] | None = None,
        verdicts: AwaitedVerdicts | None = None,
    ) -> None:
        self.settings = settings
        self.callback = callback
        self.on_event = on_event
        self.verdicts = verdicts
        self.topics = [settings.flags_topic, *([settings.verdicts_topic] if verdicts is not None else [])]
        self.received = 0
        self.verdicts_received = 0
        self.duplicates = 0
        self.invalid = 0

    async def start(self) -> None:
        """Start consuming in the background; `ready()` tells when it is positioned."""
        self._ready = asyncio.Event()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._task = asyncio.create_task(self._run(), name="flag-subscriber")

    async def ready(self, timeout_s: float | None = None) -> None:
        """Wait until the subscriber has its partitions and start offsets."""
        await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def aclose(self) -> None:
        task = getattr(self, "_task", None)
        if task is not None:
            task.cancel()
            await asyncio.wait({task})  # (never swallows the caller's own cancellation)

    async def _run(self) -> None:
        backoff = Backoff(self.settings.reconnect_initial_s, self.settings.reconnect_max_s)
        while True:
            consumer = self._consumer()
            try:
                await consumer.start()
                await self._position(consumer)
                self._ready.set()
                backoff.reset()
                async for message in consumer:
                    if message.topic == self.settings.flags_topic:
                        await self._handle(message.value)
                    else:
                        self._settle(message.value)
            except asyncio.CancelledError:
                raise
            except BROKER_FAILURES as exc:
                log.warning(
                    "flag subscriber: broker problem (%r); reconnecting in %.1fs", exc, backoff.delay_s
                )
            except Exception:
                log.exception("flag subscriber failed; restarting in %.1fs", backoff.delay_s)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(consumer.stop(), 2.0)
            await backoff.sleep()

    def _consumer(self) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            client_id=f"{self.settings.client_id}-flags",
            group_id=None,
            enable_auto_commit=False,
            # Only for offsets lost after the start (a broker that came back empty):
            # the start position itself is chosen in _position.
            auto_offset_reset="earliest",
            fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
            request_timeout_ms=int(self.settings.request_timeout_s * 1000),
        )

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        await consumer.topics()  # refreshes the cluster metadata
        missing = [t for t in self.topics if not consumer.partitions_for_topic(t)]
        if missing and self.settings.create_topics:
            counts = self.settings.topic_partitions()
            await ensure_topics(self.settings, {t: counts[t] for t in missing})
            await consumer.topics()
            missing = [t for t in self.topics if not consumer.partitions_for_topic(t)]
        if missing:
            raise KafkaError(f"topic {missing[0]!r} not found")
        tps = [TopicPartition(t, p) for t in self.topics for p in sorted(consumer.partitions_for_topic(t))]
        consumer.assign(tps)
        if self.settings.subscriber_offset_reset == "latest" and not self._ready.is_set():
            await consumer.seek_to_end(*tps)
        else:
            await consumer.seek_to_beginning(*tps)
        for tp in tps:  # resolve the positions now, so `ready()` means positioned
            await consumer.position(tp)

    def _parse(self, model: type[E], value: bytes | None) -> E | None:
        try:
            return model.model_validate_json(value or b"")
        except (ValidationError, json.JSONDecodeError):
            self.invalid += 1
            log.error("flag subscriber: dropping a value that is not a %s: %.200r", model.__name__, value)
            return None

    def _new(self, event_id: str) -> bool:
        """False for an event id seen within the dedupe window (a duplicate)."""
        if event_id in self._seen:
            self.duplicates += 1
            return False
        self._seen[event_id] = None
        while len(self._seen) > self.settings.dedupe_window:
            self._seen.popitem(last=False)
        return True

    def _settle(self, value: bytes | None) -> None:
        assert self.verdicts is not None
        event = self._parse(VerdictEvent, value)
        if event is not None and self._new(event.event_id):
            self.verdicts_received += 1
            self.verdicts.settle(event.tenant, event.response_id, verdict_of(event))

    async def _handle(self, value: bytes | None) -> None:
        event = self._parse(FlagEvent, value)
        if event is None or not self._new(event.event_id):
            return
        self.received += 1
        try:
            if self.on_event is not None:
                self.on_event(event)
            if event.decision == "block":  # an alert blocks nothing (Policy.monitor_blocking)
                result = self.callback(event.conversation_id, event.categories, event.tenant)
                if inspect.isawaitable(result):
                    await result
        except Exception:
            log.exception("flag subscriber: callback failed for %s", event.event_id)

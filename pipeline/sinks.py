"""Where flag and billing events go: pluggable sinks behind one small interface.

Also the interface of a flag recorder (`FlagRecorder`; `deltaguard.recording` implements
it), so that the lanes depend on what they call, not on the recording store.

A sink is `send(events)` plus `aclose()`. `SinkWriter` puts a bounded queue and one
delivery task in front of a sink (`deltaguard.worker.BoundedWorker`), so a slow or
failing sink never delays the caller: failed batches are retried with backoff until
taken (at least once; event ids are stable) and `aclose()` drains what is queued before
closing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from deltaguard.events import Event, FlagEvent
from deltaguard.state.store import ResponseRecord
from deltaguard.worker import BoundedWorker, Retry

log = logging.getLogger("deltaguard.sinks")


class EventSink(Protocol):
    async def send(self, events: Sequence[Event]) -> None: ...

    async def aclose(self) -> None: ...


class MemorySink:
    """Keeps events in a list; `unique()` drops redelivered duplicates by event id."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def send(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def unique(self) -> list[Event]:
        seen: set[str] = set()
        out = []
        for event in self.events:
            if event.event_id not in seen:
                seen.add(event.event_id)
                out.append(event)
        return out

    async def aclose(self) -> None:
        return None


class JsonlSink:
    """Appends one JSON object per line; each batch is flushed and fsynced before it counts."""

    def __init__(self, path: Path, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self._lock = threading.Lock()

    def _write(self, lines: str) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())

    async def send(self, events: Sequence[Event]) -> None:
        lines = "".join(json.dumps(e.model_dump(mode="json"), ensure_ascii=False) + "\n" for e in events)
        await asyncio.to_thread(self._write, lines)

    async def aclose(self) -> None:
        return None


def _describe_events(events: Sequence[Event]) -> str:
    return f"event {events[0].event_id}" if len(events) == 1 else f"{len(events)} events"


class SinkWriter:
    """A bounded queue and a delivery task in front of one sink (a `BoundedWorker`)."""

    def __init__(
        self,
        sink: EventSink,
        name: str,
        maxsize: int = 10_000,
        batch_size: int = 256,
        retry_initial_s: float = 0.05,
        retry_max_s: float = 5.0,
        on_delivered: Callable[[Sequence[Event]], None] | None = None,
    ) -> None:
        self.sink = sink
        self.name = name
        self.on_delivered = on_delivered
        self.delivered = 0
        # Retried until taken: events are never dropped, and their ids are stable.
        self._worker: BoundedWorker[Event] = BoundedWorker(
            f"sink:{name}",
            self._deliver,
            maxsize=maxsize,
            batch_size=batch_size,
            retry=Retry(None, retry_initial_s, retry_max_s),
            log=log,
            describe=_describe_events,
        )

    def start(self) -> None:
        self._worker.start()

    @property
    def depth(self) -> int:
        return self._worker.depth

    @property
    def failures(self) -> int:
        """Deliveries the sink refused (each retried)."""
        return self._worker.failures

    async def put(self, event: Event) -> None:
        """Queue an event; waits only when the queue is full (backpressure)."""
        await self._worker.put(event)

    async def flush(self) -> None:
        """Wait until every event queued so far has been delivered."""
        await self._worker.drain()

    async def _deliver(self, batch: list[Event]) -> None:
        await self.sink.send(batch)
        self.delivered += len(batch)
        if self.on_delivered is not None:
            self.on_delivered(batch)

    async def aclose(self, timeout_s: float = 10.0) -> list[Event]:
        """Drain, then close the sink. Returns what could not be delivered in time."""
        try:
            left = await self._worker.aclose(time.monotonic() + timeout_s)
        finally:
            await self.sink.aclose()
        return list(left)


class FlagRecorder(Protocol):
    """What the safety stage needs from a recorder."""

    async def start(self) -> None: ...

    async def submit(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> None: ...

    async def aclose(self, timeout_s: float = 10.0) -> int: ...

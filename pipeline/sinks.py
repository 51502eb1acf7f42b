"""Where flag and billing events go: pluggable sinks behind one small interface.

Also the interface of a flag recorder (`FlagRecorder`; `deltaguard.recording` implements
it), so that the lanes depend on what they call, not on the recording store.

A sink is `send(events)` plus `aclose()`. `SinkWriter` puts a bounded queue and one
delivery task in front of a sink, so a slow or failing sink never delays the caller:
failed batches are retried with backoff (at least once; event ids are stable) and
`aclose()` drains what is queued before closing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from deltaguard.errors import LaneClosed
from deltaguard.events import Event, FlagEvent
from deltaguard.state.store import ResponseRecord

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


class SinkWriter:
    """A bounded queue and a delivery task in front of one sink."""

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
        self.batch_size = batch_size
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.on_delivered = on_delivered
        self._queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._inflight: list[Event] = []
        self.delivered = 0
        self.failures = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"sink:{self.name}")

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    async def put(self, event: Event) -> None:
        """Queue an event; waits only when the queue is full (backpressure)."""
        if self._closing:
            raise LaneClosed(f"sink {self.name} is closing; event {event.event_id} not accepted")
        await self._queue.put(event)

    async def flush(self) -> None:
        """Wait until every event queued so far has been delivered."""
        await self._queue.join()

    async def _deliver(self, batch: list[Event]) -> None:
        delay = self.retry_initial_s
        while True:
            try:
                await self.sink.send(batch)
                self.delivered += len(batch)
                if self.on_delivered is not None:
                    self.on_delivered(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                log.exception(
                    "sink %s failed to take %d events; retrying in %.2fs", self.name, len(batch), delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_max_s)

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            batch = [first]
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._inflight = batch
            await self._deliver(batch)  # on cancellation the batch stays in _inflight
            self._inflight = []
            for _ in batch:
                self._queue.task_done()

    async def aclose(self, timeout_s: float = 10.0) -> list[Event]:
        """Drain, then close the sink. Returns what could not be delivered in time."""
        self._closing = True
        if self._task is not None:
            try:
                await asyncio.wait_for(self._queue.join(), timeout_s)
            except TimeoutError:
                log.error("sink %s: %d events undelivered at shutdown", self.name, self._queue.qsize())
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        leftover = list(self._inflight)
        while not self._queue.empty():
            leftover.append(self._queue.get_nowait())
        await self.sink.aclose()
        return leftover


class FlagRecorder(Protocol):
    """What the safety stage needs from a recorder."""

    async def start(self) -> None: ...

    async def submit(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> None: ...

    async def aclose(self, timeout_s: float = 10.0) -> int: ...

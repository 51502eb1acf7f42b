"""One bounded worker: a bounded queue and one task that handles its jobs in batches.

Every background loop of DeltaGuard is this worker with another handler: the monitor
and post-inference lanes, the sink writers in front of each event sink, the recorder of
flagged conversations. They differ only in what a batch is handed to and in what a
failure costs, so the discipline is written once:

- the queue is bounded: `put()` waits when it is full (back-pressure), never grows;
- the task takes a job and those queued behind it, up to `batch_size`; it never waits
  for a batch to fill;
- a failing batch is retried with backoff when a `Retry` says so, then dropped (logged,
  counted); an unexpected error never stops the worker;
- `asyncio.CancelledError` is always re-raised;
- `drain()` waits for what is queued without stopping; `aclose(deadline)` drains until
  the deadline, then stops the task even when draining failed, and returns what it did
  not finish (`Leftovers`);
- one `Lifecycle` (new, running, closing, closed) that refuses illegal transitions.

    >>> import asyncio, time
    >>> async def main():
    ...     seen = []
    ...     async def handle(batch):
    ...         seen.append(list(batch))
    ...     worker = BoundedWorker("doc", handle, maxsize=8, batch_size=2)
    ...     worker.start()
    ...     for n in range(3):
    ...         await worker.put(n)
    ...     await worker.drain()
    ...     left = await worker.aclose(time.monotonic() + 1.0)
    ...     return seen, len(left)
    >>> asyncio.run(main())
    ([[0, 1], [2]], 0)

The module sits at the bottom of the layers (it imports only `errors`), so that the
sinks, the lanes, the recorder and the Kafka sink all build on it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from deltaguard.errors import LaneClosed, LifecycleError

T = TypeVar("T")

_log = logging.getLogger("deltaguard.worker")


class Lifecycle(enum.Enum):
    """Where a component is in its life; `to()` refuses the transitions that make no sense.

    >>> Lifecycle.NEW.to(Lifecycle.RUNNING, "sink:flags")
    <Lifecycle.RUNNING: 'running'>
    >>> Lifecycle.CLOSED.to(Lifecycle.RUNNING, "sink:flags")
    Traceback (most recent call last):
    ...
    deltaguard.errors.LifecycleError: sink:flags: cannot start: it is closed
    """

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"

    def to(self, target: Lifecycle, owner: str) -> Lifecycle:
        """`target`, when `owner` may go there from here; else `LifecycleError`."""
        if target not in _NEXT[self]:
            raise LifecycleError(f"{owner}: cannot {_VERB[target]}: it is {self.value}")
        return target


# A component that never started closes at once (new -> closed); one whose start failed
# half-way too.
_NEXT: dict[Lifecycle, frozenset[Lifecycle]] = {
    Lifecycle.NEW: frozenset({Lifecycle.RUNNING, Lifecycle.CLOSED}),
    Lifecycle.RUNNING: frozenset({Lifecycle.CLOSING}),
    Lifecycle.CLOSING: frozenset({Lifecycle.CLOSED}),
    Lifecycle.CLOSED: frozenset(),
}
_VERB = {
    Lifecycle.NEW: "be new again",
    Lifecycle.RUNNING: "start",
    Lifecycle.CLOSING: "begin closing",
    Lifecycle.CLOSED: "close",
}


class Backoff:
    """Waits that double from `initial_s` up to `max_s`; `reset()` after a success.

    >>> b = Backoff(0.05, 0.15)
    >>> [b.next_delay() for _ in range(4)]
    [0.05, 0.1, 0.15, 0.15]
    """

    def __init__(self, initial_s: float, max_s: float) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.delay_s = initial_s

    def reset(self) -> None:
        self.delay_s = self.initial_s

    def next_delay(self) -> float:
        """The wait to take now; the one after it is twice as long (up to `max_s`)."""
        delay, self.delay_s = self.delay_s, min(self.delay_s * 2, self.max_s)
        return delay

    async def sleep(self) -> None:
        await asyncio.sleep(self.next_delay())


@dataclass(frozen=True, slots=True)
class Retry:
    """How a worker retries a failing batch: `attempts` tries in all (None: until it is
    taken, for events that must not be lost), waiting `initial_s`, then twice as long
    each time, up to `max_s`."""

    attempts: int | None = None
    initial_s: float = 0.05
    max_s: float = 5.0

    def backoff(self) -> Backoff:
        return Backoff(self.initial_s, self.max_s)


@dataclass(frozen=True, slots=True)
class Leftovers(Generic[T]):
    """What a worker closed without finishing, oldest first.

    `interrupted` is the batch its handler was stopped in at the deadline (it may be
    partly done: deliver it again, at least once); `queued`, jobs it never started."""

    interrupted: list[T] = field(default_factory=list)
    queued: list[T] = field(default_factory=list)

    def __iter__(self) -> Iterator[T]:
        yield from self.interrupted
        yield from self.queued

    def __len__(self) -> int:
        return len(self.interrupted) + len(self.queued)


def _describe(batch: Sequence[object]) -> str:
    return repr(batch[0]) if len(batch) == 1 else f"a batch of {len(batch)} jobs"


class BoundedWorker(Generic[T]):
    """A bounded queue and one task that hands its jobs to `handle`, in batches.

    `handle(batch)` gets one to `batch_size` jobs, in queue order. When it raises, the
    batch is retried as `retry` says (no retry when None), then dropped: `failures`
    counts failed attempts, `dropped` the jobs given up. `describe(batch)` names a batch
    in logs and refusals. `log`: the owner's logger.
    """

    def __init__(
        self,
        name: str,
        handle: Callable[[list[T]], Awaitable[None]],
        *,
        maxsize: int,
        batch_size: int = 1,
        retry: Retry | None = None,
        log: logging.Logger | None = None,
        describe: Callable[[Sequence[T]], str] = _describe,
    ) -> None:
        if maxsize < 1:  # asyncio reads 0 as unbounded
            raise ValueError(f"{name}: maxsize must be at least 1, not {maxsize}")
        if batch_size < 1:
            raise ValueError(f"{name}: batch_size must be at least 1, not {batch_size}")
        self.name = name
        self.handle = handle
        self.batch_size = batch_size
        self.retry = retry
        self.log = log or _log
        self.describe = describe
        self.state = Lifecycle.NEW
        self.failures = 0  # attempts that raised
        self.dropped = 0  # jobs given up
        self._queue: asyncio.Queue[T] = asyncio.Queue(maxsize)
        self._inflight: list[T] = []
        self._task: asyncio.Task[None] | None = None

    @property
    def depth(self) -> int:
        """Jobs waiting (not counting the batch in hand)."""
        return self._queue.qsize()

    def start(self) -> None:
        """Start the task (on the running event loop)."""
        self.state = self.state.to(Lifecycle.RUNNING, self.name)
        self._task = asyncio.create_task(self._run(), name=self.name)
        self._task.add_done_callback(self._report_crash)

    async def put(self, job: T) -> None:
        """Queue a job; waits only while the queue is full (back-pressure)."""
        if self.state is not Lifecycle.RUNNING:
            raise LaneClosed(f"{self.name} is {self.state.value}; {self.describe([job])} not accepted")
        await self._queue.put(job)

    async def drain(self) -> None:
        """Wait until every job queued so far is done (handled or given up)."""
        await self._queue.join()

    async def aclose(self, deadline: float) -> Leftovers[T]:
        """Stop taking jobs, drain until `deadline` (a `time.monotonic()` instant), stop
        the task, and return what was not done. A second call returns nothing."""
        if self.state in (Lifecycle.CLOSING, Lifecycle.CLOSED):
            return Leftovers()
        if self.state is Lifecycle.NEW:
            self.state = self.state.to(Lifecycle.CLOSED, self.name)
            return Leftovers(queued=self._take_queued())
        self.state = self.state.to(Lifecycle.CLOSING, self.name)
        try:
            if self._inflight or self.depth:  # (a zero timeout times out even an empty queue)
                await asyncio.wait_for(self._queue.join(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            self.log.error(
                "%s: %d jobs not done at the shutdown deadline", self.name, len(self._inflight) + self.depth
            )
        finally:
            # Even when draining failed (or the caller was cancelled): the task stops.
            await self._stop_task()
            self.state = self.state.to(Lifecycle.CLOSED, self.name)
        interrupted, self._inflight = self._inflight, []
        for _ in interrupted:  # so that no `drain()` waits for it forever
            self._queue.task_done()
        return Leftovers(interrupted, self._take_queued())

    # -- the task --------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._inflight = batch
            await self._attempt(batch)  # on cancellation the batch stays in _inflight
            self._inflight = []
            for _ in batch:
                self._queue.task_done()

    async def _attempt(self, batch: list[T]) -> None:
        retry = self.retry
        backoff = retry.backoff() if retry is not None else None
        attempts = 1 if retry is None else math.inf if retry.attempts is None else retry.attempts
        tried = 0
        while True:
            tried += 1
            try:
                await self.handle(batch)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                self.failures += 1
                what = self.describe(batch)
                if tried >= attempts:
                    self.dropped += len(batch)
                    self.log.exception("%s: %s failed%s", self.name, what, "; giving up" if retry else "")
                    return
                assert retry is not None and backoff is not None
                delay = backoff.next_delay()
                if retry.attempts is None:
                    # Retried until taken: each failure is an error worth its traceback.
                    self.log.exception("%s: %s failed; retrying in %.2fs", self.name, what, delay)
                else:
                    self.log.warning("%s: %s failed; retrying in %.2fs", self.name, what, delay)
                await asyncio.sleep(delay)

    async def _stop_task(self) -> None:
        task = self._task
        if task is None or task.done():
            return
        task.cancel()
        # Wait for it without swallowing a cancellation of our own caller.
        await asyncio.wait({task})

    def _take_queued(self) -> list[T]:
        out = []
        while not self._queue.empty():
            out.append(self._queue.get_nowait())
            self._queue.task_done()
        return out

    def _report_crash(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.log.error("%s: worker task ended", self.name, exc_info=task.exception())

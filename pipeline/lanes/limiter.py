"""A thread pool classifier work runs on, shared fairly between tenants: the request
path's (created at startup, injected everywhere) and the background lanes' (below it).

A fold cannot be interrupted, and one large request costs seconds of CPU: with a plain
FIFO pool, a tenant that sends a few of them queues every other tenant's trivial turns
behind them. So each tenant may hold at most `per_tenant` of the threads at once (the
gateway makes it all but one when it serves several tenants, so another tenant always
finds one; default: no cap), and when a thread frees up it
goes to the waiting tenant that has used the least thread time so far, for its weight
(weighted fair queuing by time used: a tenant of weight 3 gets three times the thread time
of a tenant of weight 1 while both wait; a tenant that comes back after idling starts
level with the active tenant that used the least, not ahead by all it did not use).

A pool given a `nice` (the stage's background pool: the monitor and post-inference lanes)
runs its threads at that lower OS priority, so that under CPU contention the request path
(the event loop, the gate's pool) runs first; onnxruntime with one intra-op thread
computes in the calling thread, so the detector's work is niced with it.

    limiter = InferenceLimiter(threads=4, per_tenant=3, weights={"acme": 3.0})
    verdict = await limiter.run(tracker.score_turn, response_id, items, tenant="acme")
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger("deltaguard.stage")


def lower_priority(nice: int) -> None:
    """The calling thread's OS priority lowered by `nice` (Linux: threads have their own;
    elsewhere this would nice the whole process, so it is left alone)."""
    if nice <= 0 or not sys.platform.startswith("linux"):
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:  # a sandbox that forbids it: the pool still runs, unniced
        log.warning("could not lower the priority of %s: %s", threading.current_thread().name, exc)


class InferenceLimiter:
    """Runs classifier folds off the event loop on a fixed number of threads, fairly.

    Two per stage: the request path's (the gate and what a turn awaits), created at
    `start()` unless one is given, which whatever shares the stage's classifiers (the
    LiteLLM adapter) runs on too, and the background lanes', at a lower OS priority."""

    def __init__(
        self,
        threads: int,
        per_tenant: int | None = None,
        weights: Mapping[str, float] | None = None,
        *,
        nice: int = 0,
        name: str = "infer",
    ) -> None:
        """`weights`: each tenant's share of thread time against the others' (default 1).
        `nice`: how much lower than the process's the threads' OS priority is."""
        bad = {t: w for t, w in (weights or {}).items() if not w > 0}
        if bad:
            raise ValueError(f"tenant weights must be positive: {bad}")
        if nice < 0:
            raise ValueError(f"nice must be 0 or more (a lower priority), not {nice}")
        self.weights = dict(weights or {})
        self.nice = nice
        self._executor = ThreadPoolExecutor(
            max_workers=threads,
            thread_name_prefix=f"deltaguard-{name}",
            initializer=lower_priority,
            initargs=(nice,),
        )
        self.threads = threads
        self.per_tenant = min(per_tenant, threads) if per_tenant is not None else threads
        self._busy = 0
        self._running: dict[str, int] = {}
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
        self._used: dict[str, float] = {}  # thread seconds, per tenant with work running or waiting

    async def run(self, fn: Any, *args: Any, tenant: str = "") -> Any:
        """`fn(*args)` on a thread, once `tenant` is granted one."""
        await self._acquire(tenant)
        start = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        finally:
            self._used[tenant] = self._used.get(tenant, 0.0) + time.perf_counter() - start
            self._release(tenant)

    def waiting(self) -> dict[str, int]:
        """Jobs waiting for a thread, per tenant."""
        return {t: len(q) for t, q in self._waiting.items() if q}

    async def _acquire(self, tenant: str) -> None:
        if tenant not in self._used:  # level with the active tenants that used the least
            level = min((self._share(t) for t in self._used), default=0.0)
            self._used[tenant] = level * self.weights.get(tenant, 1.0)
        if not self._waiting.get(tenant) and self._can_run(tenant) and not self.waiting():
            self._take(tenant)
            return
        ticket: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(tenant, deque()).append(ticket)
        self._grant()
        try:
            await ticket
        except asyncio.CancelledError:
            if ticket.done() and not ticket.cancelled():
                self._release(tenant)  # granted as it was cancelled: hand the thread on
            else:
                self._waiting[tenant].remove(ticket)
                self._forget(tenant)
            raise

    def _share(self, tenant: str) -> float:
        """Thread time used, for the tenant's weight."""
        return self._used.get(tenant, 0.0) / self.weights.get(tenant, 1.0)

    def _can_run(self, tenant: str) -> bool:
        return self._busy < self.threads and self._running.get(tenant, 0) < self.per_tenant

    def _take(self, tenant: str) -> None:
        self._busy += 1
        self._running[tenant] = self._running.get(tenant, 0) + 1

    def _release(self, tenant: str) -> None:
        self._busy -= 1
        self._running[tenant] -= 1
        self._forget(tenant)
        self._grant()

    def _forget(self, tenant: str) -> None:
        if not self._running.get(tenant) and not self._waiting.get(tenant):
            self._running.pop(tenant, None)
            self._waiting.pop(tenant, None)
            self._used.pop(tenant, None)

    def _grant(self) -> None:
        """Free threads to the waiting tenants that used the least, within their cap."""
        while self._busy < self.threads:
            eligible = [t for t, q in self._waiting.items() if q and self._can_run(t)]
            if not eligible:
                return
            tenant = min(eligible, key=self._share)
            self._take(tenant)
            self._waiting[tenant].popleft().set_result(None)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

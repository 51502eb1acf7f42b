"""The LiteLLM guardrail's stage: loaded once at proxy startup, drained at its shutdown.

`GuardrailStage` owns the `HistoryGate` behind `DeltaGuardGuardrail`: the classifiers
load once, under a lock, and every hook waits for that same load (`ready()`).

Shutdown: LiteLLM has no shutdown hook for guardrails, and uvicorn re-raises SIGTERM
once its lifespan teardown is done, which ends the process without unwinding the event
loop. So the stage chains SIGTERM/SIGINT handlers in front of the server's; on either
signal a closer task waits for the proxy's requests in flight (their answers queue
output scoring and billing), then drains the lanes and sinks, while the proxy's teardown
waits for it. Events still undelivered then are appended to `spool_path`.

LiteLLM's proxy modules are imported only where they are used, and optional there: the
stage runs (and closes through `aclose`) in any asyncio server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deltaguard.errors import LaneClosed
from deltaguard.events import Event
from deltaguard.integrations.history_gate import HistoryGate
from deltaguard.integrations.litellm_settings import DeltaGuardSettings
from deltaguard.recording import TranscriptRecorder
from deltaguard.sinks import EventSink, JsonlSink, MemorySink
from deltaguard.state.loading import build_scorer
from deltaguard.telemetry.metrics import PrometheusMetrics

log = logging.getLogger("deltaguard.litellm")


def event_sink(path: Path | None, fsync: bool) -> EventSink:
    """A JSONL sink at `path` (its folder created); in memory only when `path` is None."""
    if path is None:
        return MemorySink()
    path.parent.mkdir(parents=True, exist_ok=True)
    return JsonlSink(path, fsync=fsync)


def spool_undelivered(events: Sequence[Event], path: Path | None) -> None:
    """Append events no sink took at shutdown to `path`, one JSON line each (logged as
    lost when there is no `path`)."""
    if not events:
        return
    if path is None:
        log.error("DeltaGuard: %d events undelivered at shutdown (no spool_path)", len(events))
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for event in events:
            f.write(json.dumps(event.model_dump(mode="json"), ensure_ascii=False) + "\n")
    log.warning("DeltaGuard: %d undelivered events spooled to %s", len(events), path)


async def requests_drained() -> None:
    """Wait until the proxy has no HTTP request in flight.

    LiteLLM counts them (`InFlightRequestsMiddleware`); the wait is bounded by its
    graceful-shutdown timeout (`GRACEFUL_SHUTDOWN_TIMEOUT`, 30 s by default), as the
    server's own wait is. Without that middleware, returns at once.
    """
    try:
        from litellm.proxy.middleware.in_flight_requests_middleware import get_in_flight_requests
        from litellm.proxy.shutdown.graceful_shutdown_manager import GracefulShutdownManager
    except ImportError:
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GracefulShutdownManager.get_timeout()
    while get_in_flight_requests() > 0 and loop.time() < deadline:
        await asyncio.sleep(0.005)


class GuardrailStage:
    """The guardrail's `HistoryGate`, started once and drained at shutdown (see the
    module docstring). The constructor only stores settings; `warm_up()` is the task the
    guardrail schedules when the proxy builds it."""

    def __init__(self, settings: DeltaGuardSettings, metrics: PrometheusMetrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._gate: HistoryGate | None = None
        self._closed = False
        self._terminating = asyncio.Event()
        self._closer: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, task: asyncio.Task[Any]) -> None:
        """Keep a background task referenced until it ends."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def warm_up(self) -> None:
        """Start the gate now, so that the first request does not wait for the load."""
        try:
            await self.ready()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("DeltaGuard failed to start; requests will retry and fail until it does")

    async def ready(self) -> HistoryGate:
        """The started gate (classifiers loaded once, under a lock)."""
        if self._gate is not None:
            return self._gate
        async with self._start_lock:
            if self._closed:
                raise LaneClosed("the DeltaGuard guardrail is closed (the proxy is shutting down)")
            if self._gate is None:
                if self._closer is None:
                    # Watched before the classifiers load: a SIGTERM that arrives while they
                    # do must still drain the requests waiting on them.
                    self._closer = asyncio.create_task(self._close_at_exit(), name="deltaguard:closer")
                    self.spawn(self._closer)
                    self._watch_shutdown_signals()
                s = self.settings
                scorer = await asyncio.to_thread(build_scorer, tuple(s.classifiers), thresholds=s.thresholds)
                gate = HistoryGate(
                    scorer,
                    monitor=s.monitor,
                    flag_sink=event_sink(s.flags_path, s.fsync),
                    billing_sink=event_sink(s.billing_path, s.fsync),
                    config=s.stage_config(),
                    metrics=self.metrics,
                    recorder=TranscriptRecorder(str(s.record_path), scorer) if s.record_path else None,
                )
                await gate.start()
                self._gate = gate
                log.info("DeltaGuard ready: gate %s, monitor %s", gate.gate_classifiers, s.monitor)
        return self._gate

    async def aclose(self) -> None:
        """Drain the lanes and sinks; undelivered events go to `spool_path` (or the log)."""
        self._closed = True
        self._terminating.set()  # the closer task, if waiting, ends too
        gate, self._gate = self._gate, None
        if gate is None:
            return
        left = await gate.aclose()
        log.info("DeltaGuard closed (undelivered events: %s)", left)
        spool_undelivered(gate.undelivered, self.settings.spool_path)

    async def _close_at_exit(self) -> None:
        # On SIGTERM or SIGINT (`_watch_shutdown_signals`) wait for the requests in flight,
        # then drain; the teardown awaits this task (`_shutting_down`). A loop cancelled
        # otherwise (an embedding server) lands in `finally`.
        try:
            await self._terminating.wait()
            await requests_drained()
        finally:
            await self.aclose()

    def _watch_shutdown_signals(self) -> None:
        """Chain SIGTERM/SIGINT handlers in front of the server's own (uvicorn's)."""
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            # Only a server's handler is chained; without one the signal ends the process.
            if not callable(previous) or previous is signal.default_int_handler:
                continue

            def on_signal(sig: int, frame: Any, previous: Any = previous) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(self._shutting_down)
                previous(sig, frame)

            signal.signal(signum, on_signal)

    def _shutting_down(self) -> None:
        if self._terminating.is_set() or self._closer is None:
            return
        self._terminating.set()
        # The proxy's teardown awaits its audit-log tasks (up to 5 s) before the process
        # ends: the one registry of background work it waits for. Registering the drain
        # there makes the teardown wait for it too.
        with contextlib.suppress(ImportError):
            from litellm.proxy.management_helpers.audit_logs import track_audit_task

            track_audit_task(self._closer)

"""How a started safety stage's parts fit together: trackers, sink writers, lanes.

`TrackerTable` keeps one conversation tracker (and so one bounded store) per lane and
tenant: a tenant can never continue, read or evict another tenant's conversations.
`assemble` builds what `SafetyStage.start` runs: the sink writers, the flag outlet,
the gate, monitor and post-inference lanes, what watches each turn beside the gate (the
monitor lane, or a turn publisher in distributed mode), the provenance sketch's fold
beside inference, and the `TurnLanes` each `Turn` is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from deltaguard.journal import BillingJournal
from deltaguard.lanes.flags import FlagOutlet
from deltaguard.lanes.gate import GateLane
from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.lanes.monitor_lane import MonitorLane
from deltaguard.lanes.post import PostLane
from deltaguard.lanes.provenance import ProvenanceLane
from deltaguard.lanes.publisher import TurnPublisher
from deltaguard.lanes.sanitize import SanitizedItems
from deltaguard.lanes.turn import TurnLanes
from deltaguard.sinks import EventSink, FlagRecorder, SinkWriter
from deltaguard.state.backends import StateBackend
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
from deltaguard.telemetry.metrics import StageMetrics


class Stage(Protocol):
    """What `assemble` reads of the stage (`SafetyStage`'s settings and shared parts)."""

    config: Any  # StageConfig
    flag_sink: EventSink
    billing_sink: EventSink
    turn_sink: EventSink | None
    verdicts: Any  # AwaitedVerdicts | None: where held turns await remote verdicts
    recorder: FlagRecorder | None
    metrics: StageMetrics
    gate_scorer: Scorer
    monitor_scorer: Scorer | None
    actions_scorer: Scorer | None
    lockout: ConversationLockout
    sanitized: SanitizedItems
    queue_monitor: bool
    stream_classifiers: frozenset[str]

    def mark_flagged(self, conversation_id: str, categories: Sequence[str], tenant: str = ...) -> None: ...


class TrackerTable:
    """(lane, tenant) -> tracker, made on first use with the lane's scorer."""

    def __init__(
        self,
        scorers: dict[str, Scorer | None],
        limits: StoreLimits,
        factory: Callable[[StoreLimits], ConversationStore],
        backend: StateBackend | None = None,
    ) -> None:
        self.scorers = scorers
        self.limits = limits
        self.factory = factory
        self.backend = backend
        self.trackers: dict[tuple[str, str], ConversationTracker] = {}

    def get(self, lane: str, tenant: str) -> ConversationTracker:
        tracker = self.trackers.get((lane, tenant))
        if tracker is None:
            scorer = self.scorers[lane]
            assert scorer is not None, f"the stage has no {lane} classifiers"
            if self.factory is ConversationStore:
                # One namespace per lane and tenant, in the process and in the backend.
                namespace = f"{lane}/{quote(tenant, safe='')}"
                store = ConversationStore(
                    self.limits, backend=self.backend, namespace=namespace, scorer_tag=scorer.tag
                )
            else:
                store = self.factory(self.limits)
            tracker = self.trackers[(lane, tenant)] = ConversationTracker(scorer, store)
        return tracker

    def gate(self, tenant: str) -> ConversationTracker:
        return self.get("gate", tenant)

    def monitor(self, tenant: str) -> ConversationTracker | None:
        return self.get("monitor", tenant) if self.scorers["monitor"] is not None else None

    def actions(self, tenant: str) -> ConversationTracker:
        return self.get("actions", tenant)


def split_lanes(scorer: Scorer, monitor: Sequence[str]) -> tuple[Scorer, Scorer | None, Scorer | None]:
    """The gate lane's scorer, the monitor lane's and the "actions" lane's (None: no such
    classifiers): the classifiers named in `monitor`, and those whose `lane` is
    "monitor", move to the monitor lane; those whose `lane` is "actions" (the provenance
    sketch, read only when the model acts) are folded beside inference
    (`provenance.ProvenanceLane`); the gate keeps the rest."""
    unknown = set(monitor) - {c.name for c in scorer.classifiers}
    if unknown:
        raise ValueError(f"monitor lane names unknown classifiers: {sorted(unknown)}")
    watched = [c for c in scorer.classifiers if c.name in monitor or c.lane == "monitor"]
    beside = [c for c in scorer.classifiers if c.lane == "actions" and c not in watched]
    gate = Scorer([c for c in scorer.classifiers if c not in watched and c not in beside], scorer.policy)
    return (
        gate,
        Scorer(watched, scorer.policy) if watched else None,
        Scorer(beside, scorer.policy) if beside else None,
    )


def lockout_of(config: Any) -> ConversationLockout:
    """The lock-out a stage's `StageConfig` asks for, bounded like its conversation store."""
    c = config
    return ConversationLockout(
        c.block_limit,
        c.probe_categories,
        c.store.max_responses,
        c.store.ttl_s,
        lock_s=c.lock_s,
        first_turn_window_s=c.first_turn_window_s,
        backend=c.state,
        verdict_wait=c.verdict_wait,
    )


@dataclass(frozen=True, slots=True)
class LaneSet:
    """The running parts of a started stage."""

    writers: dict[str, SinkWriter]  # flags, billing and (distributed mode) turns
    gate: GateLane
    monitor: MonitorLane
    watcher: MonitorLane | TurnPublisher  # what each gated turn is handed to
    post: PostLane
    turn: TurnLanes
    provenance: ProvenanceLane | None  # the action check's sketch, folded beside inference

    def start(self) -> None:
        for worker in (*self.writers.values(), self.monitor.worker, self.post.worker):
            worker.start()

    def depths(self) -> dict[str, int]:
        """Each lane's and sink writer's queue depth."""
        depths = {"monitor": self.monitor.worker.depth, "post": self.post.worker.depth}
        return {**depths, **{name: writer.depth for name, writer in self.writers.items()}}

    async def aclose(self, deadline: float, undelivered: list[Any]) -> dict[str, int]:
        """Drain the lanes, then close them and the sink writers by `deadline` (monotonic);
        what is left undelivered joins `undelivered`. Events left per writer."""
        # Both lanes drain before either stops taking jobs: a turn in flight still queues.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), max(0.0, deadline - time.monotonic()))
        await self.monitor.aclose(deadline)  # monitor jobs left at the deadline are dropped
        if self.provenance is not None:
            self.provenance.cancel()  # sketches left at the deadline: folded again when read
        undelivered.extend(await self.post.aclose(deadline))  # never started: billing kept
        left = {}
        for name, writer in self.writers.items():
            events = await writer.aclose(max(0.0, deadline - time.monotonic()))
            undelivered.extend(events)
            left[name] = len(events)
        return left

    async def flush(self) -> None:
        """Every job queued so far done, and its events delivered to the sinks."""
        await self.drain()
        for writer in self.writers.values():
            await writer.flush()

    async def settled(self) -> None:
        """Every cancelled `Turn.finish` has queued what follows it."""
        while self.turn.settling:
            await asyncio.gather(*self.turn.settling, return_exceptions=True)

    async def drain(self) -> None:
        await self.settled()
        await self.monitor.worker.drain()
        await self.post.worker.drain()
        await self.monitor.worker.drain()  # output-only jobs queued meanwhile
        if self.provenance is not None:
            await self.provenance.drain()


def assemble(
    stage: Stage,
    trackers: TrackerTable,
    run: Callable[..., Awaitable[Any]],
    journal: BillingJournal | None = None,
    background: Callable[..., Awaitable[Any]] | None = None,
) -> LaneSet:
    """`run`: the request path's pool; `background`: the queued lanes' (default `run`)."""
    c, m = stage.config, stage.metrics
    background = background or run

    def observer(name: str) -> Callable[[Sequence[Any]], None]:
        if name == "billing" and journal is not None:

            def delivered(events: Sequence[Any]) -> None:
                m.observe_events(name, events)
                journal.done(events)

            return delivered
        return lambda events: m.observe_events(name, events)

    sinks = {"flags": stage.flag_sink, "billing": stage.billing_sink}
    writers = {
        name: SinkWriter(sink, name, c.sink_queue_size, on_delivered=observer(name))
        for name, sink in sinks.items()
    }
    if stage.turn_sink is not None:
        writers["turns"] = SinkWriter(stage.turn_sink, "turns", c.sink_queue_size)
    flags = FlagOutlet(writers["flags"], stage.recorder, trackers.gate)
    gate = GateLane(stage.gate_scorer, trackers.gate, stage.lockout, flags, m, run, stage.sanitized)
    monitor = MonitorLane(
        stage.monitor_scorer,
        trackers.monitor,
        flags,
        stage.mark_flagged,
        m,
        background if stage.queue_monitor else run,  # unqueued, a turn awaits its verdict
        maxsize=c.monitor_queue_size,
        batch_size=c.monitor_batch,
        queued=stage.queue_monitor,
        verdicts=stage.lockout.verdicts,
    )
    watcher = TurnPublisher(writers["turns"], stage.verdicts) if stage.turn_sink is not None else monitor
    post = PostLane(
        stage.gate_scorer,
        trackers.gate,
        gate.flag_output,
        flags,
        writers["billing"],
        m,
        background,
        maxsize=c.post_queue_size,
        journal=journal,
    )
    turn = TurnLanes(
        stage.gate_scorer,
        trackers.gate,
        run,
        gate.flag_output,
        watcher,
        monitor.judge,
        post.put,
        post.owe if journal is not None else None,
        m,
        stage.stream_classifiers,
        stage.sanitized,
    )
    provenance = None
    if stage.actions_scorer is not None:
        provenance = ProvenanceLane(stage.actions_scorer, trackers.actions, run, m)
    return LaneSet(writers, gate, monitor, watcher, post, turn, provenance)

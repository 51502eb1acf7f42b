"""The safety stage of a gateway, in process: the gate, monitor and post-inference lanes.

    stage = SafetyStage(scorer, monitor=("encoder",), flag_sink=..., billing_sink=...)
    await stage.start()
    gate = await stage.check_turn("resp_2", new_items, previous_response_id="resp_1")
    if gate.blocked: ...                      # before the upstream model is called
    ...stream the model's answer...
    await stage.complete_turn(gate, output_items, usage)   # returns at once
    await stage.aclose()                      # drains every lane and sink

- gate lane: the cheap classifiers, awaited before the upstream call; a block category
  over its threshold blocks the turn.
- monitor lane: the expensive classifiers, run beside inference from a bounded queue by
  one consumer (so each conversation's turns are scored in order), which folds the jobs
  queued meanwhile together (`StageConfig.monitor_batch`: one batched detector call
  across conversations); what they flag goes to the flag sink and, for block
  categories, blocks the conversation's next turn.
- post-inference lane: output scoring and the billing event, queued after the response
  so that they overlap the next request instead of delaying it.

The monitor and post-inference lanes, and the writer in front of each sink, are
`deltaguard.worker.BoundedWorker`s. Classifier work runs off the event loop on one
thread pool (`limiter.InferenceLimiter`), created at `start()` or injected. The monitor
step itself is `monitor.MonitorStep`; which conversations are refused before they are
scored is `lockout.ConversationLockout`; `drain()` waits for queued work without
stopping the stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from deltaguard import defaults
from deltaguard.errors import LaneClosed, PreviousResponseNotFound
from deltaguard.events import DEFAULT_TENANT, BillingEvent, Event, FlagEvent, TurnEvent
from deltaguard.items import Item
from deltaguard.lanes.limiter import InferenceLimiter
from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.lanes.monitor import MonitorStep, waves
from deltaguard.sinks import EventSink, FlagRecorder, MemorySink, SinkWriter
from deltaguard.state.scoring import Fold, Scorer, TurnVerdict
from deltaguard.state.store import (
    ConversationStore,
    ConversationTracker,
    PendingTurn,
    StoreLimits,
    TrackedTurn,
)
from deltaguard.telemetry.metrics import NullMetrics, StageMetrics
from deltaguard.telemetry.tracing import lane_span
from deltaguard.usage import Usage
from deltaguard.worker import BoundedWorker, Lifecycle

log = logging.getLogger("deltaguard.stage")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StageConfig:
    inference_threads: int = defaults.INFERENCE_THREADS
    monitor_queue_size: int = defaults.LANE_QUEUE_SIZE
    monitor_batch: int = defaults.MONITOR_BATCH
    post_queue_size: int = defaults.LANE_QUEUE_SIZE
    sink_queue_size: int = defaults.SINK_QUEUE_SIZE
    drain_timeout_s: float = defaults.DRAIN_TIMEOUT_S
    store: StoreLimits = field(default_factory=StoreLimits)
    # How each (lane, tenant) store is made: a benchmark's baseline may keep no snapshots.
    store_factory: Callable[[StoreLimits], ConversationStore] = ConversationStore
    # A blocked turn never joins the history, so a client can rephrase it again and again
    # from the same point until one version passes. After this many turns of one
    # conversation blocked on their own content in `probe_categories`, every later turn of
    # it is refused too. None: never. Secrets and PII are left out by default: an agent
    # reading files that hold keys is not probing.
    block_limit: int | None = defaults.BLOCK_LIMIT
    probe_categories: frozenset[str] = defaults.PROBE_CATEGORIES


@dataclass(frozen=True, slots=True)
class GateResult:
    tenant: str
    response_id: str
    conversation_id: str
    verdict: TurnVerdict
    blocked: bool
    blocked_categories: list[str]  # why it was blocked: this turn's or earlier flags


@dataclass(frozen=True, slots=True)
class _MonitorJob:
    tenant: str
    response_id: str
    conversation_id: str
    items: Sequence[Item] | None  # None: a full history (stateless client)
    history: Sequence[Item] | None
    previous_response_id: str | None
    output_only: bool = False  # `items` is the model output of `response_id`, to append
    # The gate blocked the turn: the model never saw it and the gate's block (counted by
    # the lock-out) is the decision, so the lane folds it, to keep the conversation's
    # state whole, but raises no flag of its own.
    gate_blocked: bool = False


@dataclass(frozen=True, slots=True)
class _PostJob:
    gate: GateResult
    output: Sequence[Item]
    usage: Usage


class SafetyStage:
    def __init__(
        self,
        scorer: Scorer,
        monitor: Sequence[str] = (),
        flag_sink: EventSink | None = None,
        billing_sink: EventSink | None = None,
        config: StageConfig | None = None,
        turn_sink: EventSink | None = None,
        metrics: StageMetrics | None = None,
        recorder: FlagRecorder | None = None,
        limiter: InferenceLimiter | None = None,
        queue_monitor: bool = True,
    ) -> None:
        """`turn_sink`: where turn deltas go for remote monitor workers (distributed
        mode); the in-process monitor lane then runs nothing, and remote flags come back
        through `mark_flagged`. `recorder`: records flagged conversations (gate,
        monitor and output flags; `deltaguard.recording`), started and drained with the
        stage. `limiter`: the process's inference pool (created at `start()` when not
        given, and then closed by `aclose()`). `monitor`: classifiers moved from the gate
        to the monitor lane, beside those whose `lane` is "monitor". `queue_monitor=False`:
        the caller runs the monitor lane itself, per turn, with `monitor_turn` (a proxy that
        awaits its verdict beside the model call) instead of the stage queueing it."""
        self.config = config or StageConfig()
        unknown = set(monitor) - {c.name for c in scorer.classifiers}
        if unknown:
            raise ValueError(f"monitor lane names unknown classifiers: {sorted(unknown)}")
        # The monitor lane: the classifiers named, and those that declare it (the detector).
        watched = [c for c in scorer.classifiers if c.name in monitor or c.lane == "monitor"]
        gate = [c for c in scorer.classifiers if c not in watched]
        self.gate_scorer = Scorer(gate, scorer.policy)
        self.monitor_scorer = Scorer(watched, scorer.policy) if watched else None
        self.monitor_step = MonitorStep(self.monitor_scorer) if self.monitor_scorer else None
        self.queue_monitor = queue_monitor
        self._own_limiter = limiter is None
        self._limiter = limiter  # type: ignore[assignment]
        # One tracker (and so one bounded store) per lane and tenant: a tenant can never
        # continue, read or evict another tenant's conversations.
        self._trackers: dict[tuple[str, str], ConversationTracker] = {}
        self.policy = scorer.policy
        self.flag_sink = flag_sink or MemorySink()
        self.billing_sink = billing_sink or MemorySink()
        self.turn_sink = turn_sink
        self.metrics = metrics or NullMetrics()
        self.recorder = recorder
        self.lockout = ConversationLockout(
            self.config.block_limit,
            self.config.probe_categories,
            self.config.store.max_responses,
            self.config.store.ttl_s,
        )
        self._state = Lifecycle.NEW
        # Events that could not be delivered by the shutdown deadline: the owner spools them.
        self.undelivered: list[Event] = []

    def _tracker(self, lane: str, scorer: Scorer, tenant: str) -> ConversationTracker:
        tracker = self._trackers.get((lane, tenant))
        if tracker is None:
            tracker = ConversationTracker(scorer, self.config.store_factory(self.config.store))
            self._trackers[(lane, tenant)] = tracker
        return tracker

    def gate_tracker(self, tenant: str = DEFAULT_TENANT) -> ConversationTracker:
        return self._tracker("gate", self.gate_scorer, tenant)

    def monitor_tracker(self, tenant: str = DEFAULT_TENANT) -> ConversationTracker | None:
        return self._tracker("monitor", self.monitor_scorer, tenant) if self.monitor_scorer else None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        self._state.to(Lifecycle.RUNNING, "SafetyStage")  # a second start fails here, before any work
        if self.recorder is not None:  # first: an unusable store fails startup cleanly
            await self.recorder.start()
        if self._limiter is None:
            self._limiter = InferenceLimiter(self.config.inference_threads)
        self._flags = SinkWriter(
            self.flag_sink,
            "flags",
            self.config.sink_queue_size,
            on_delivered=lambda events: self.metrics.observe_events("flags", events),
        )
        self._billing = SinkWriter(
            self.billing_sink,
            "billing",
            self.config.sink_queue_size,
            on_delivered=lambda events: self.metrics.observe_events("billing", events),
        )
        self._flags.start()
        self._billing.start()
        self._turns = (
            SinkWriter(self.turn_sink, "turns", self.config.sink_queue_size) if self.turn_sink else None
        )
        if self._turns is not None:
            self._turns.start()
        # One consumer per lane, so that each conversation's turns are scored in order.
        self._monitor_lane: BoundedWorker[_MonitorJob] = BoundedWorker(
            "lane:monitor",
            self._monitor_batch,
            maxsize=self.config.monitor_queue_size,
            batch_size=self.config.monitor_batch,
            log=log,
            describe=lambda jobs: f"monitor batch of {len(jobs)} jobs",
        )
        self._post_lane: BoundedWorker[_PostJob] = BoundedWorker(
            "lane:post", self._run_post, maxsize=self.config.post_queue_size, log=log
        )
        self._monitor_lane.start()
        self._post_lane.start()
        self._state = self._state.to(Lifecycle.RUNNING, "SafetyStage")

    async def aclose(self) -> dict[str, int]:
        """Drain the lanes, then the sinks; returns how many events were left undelivered."""
        if self._state in (Lifecycle.CLOSING, Lifecycle.CLOSED):
            return {}
        if self._state is Lifecycle.NEW:
            self._state = self._state.to(Lifecycle.CLOSED, "SafetyStage")
            return {}
        self._state = self._state.to(Lifecycle.CLOSING, "SafetyStage")
        deadline = time.monotonic() + self.config.drain_timeout_s
        # Both lanes drain before either stops taking jobs: a turn in flight still queues.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._drain_lanes(), max(0.0, deadline - time.monotonic()))
        await self._monitor_lane.aclose(deadline)  # monitor jobs left at the deadline are dropped
        post_left = await self._post_lane.aclose(deadline)
        # Post-inference jobs not started by the deadline keep their billing event.
        self.undelivered.extend(self._billing_event(job, 0.0) for job in post_left.queued)
        remaining = max(0.0, deadline - time.monotonic())
        writers = {"flags": self._flags, "billing": self._billing}
        if self._turns is not None:
            writers["turns"] = self._turns
        left = {}
        for name, writer in writers.items():
            events = await writer.aclose(remaining)
            self.undelivered.extend(events)
            left[name] = len(events)
        left["billing"] = sum(isinstance(e, BillingEvent) for e in self.undelivered)
        if self.recorder is not None:
            left["recordings"] = await self.recorder.aclose(max(0.0, deadline - time.monotonic()))
        if self._own_limiter:
            self._limiter.close()
        self._state = self._state.to(Lifecycle.CLOSED, "SafetyStage")
        return left

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until every job queued so far (monitor, post-inference) is done and its
        events are delivered to the sinks; the stage keeps running."""
        self._require_running()

        async def drained() -> None:
            await self._drain_lanes()
            for writer in (self._flags, self._billing, self._turns):
                if writer is not None:
                    await writer.flush()

        await asyncio.wait_for(drained(), timeout_s if timeout_s is not None else self.config.drain_timeout_s)

    async def _drain_lanes(self) -> None:
        await self._monitor_lane.drain()
        await self._post_lane.drain()
        await self._monitor_lane.drain()  # output-only jobs queued meanwhile

    def _require_running(self) -> None:
        if self._state is not Lifecycle.RUNNING:
            raise LaneClosed(f"safety stage is {self._state.value}")

    @property
    def queue_depths(self) -> dict[str, int]:
        if self._state is Lifecycle.NEW:
            return {}
        depths = {
            "monitor": self._monitor_lane.depth,
            "post": self._post_lane.depth,
            "flags": self._flags.depth,
            "billing": self._billing.depth,
        }
        if self._turns is not None:
            depths["turns"] = self._turns.depth
        return depths

    @property
    def stores(self) -> dict[tuple[str, str], ConversationStore]:
        """(lane, tenant) -> store."""
        return {key: tracker.store for key, tracker in self._trackers.items()}

    # -- gate lane -------------------------------------------------------------------

    async def check_turn(
        self,
        response_id: str,
        new_items: Sequence[Item],
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> GateResult:
        """Gate a turn that continues `previous_response_id` (stateful clients)."""
        self._require_running()
        gate = self.gate_tracker(tenant)
        with lane_span("gate", response_id=response_id, tenant=tenant, items=len(new_items)):
            tracked = await self._limiter.run(
                gate.score_turn, response_id, new_items, previous_response_id, conversation_id
            )
        return await self._gate(tenant, tracked, new_items, None, previous_response_id)

    async def check_history(
        self,
        response_id: str,
        items: Sequence[Item],
        conversation_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> GateResult:
        """Gate a turn from a client that resent its whole history (stateless clients)."""
        self._require_running()
        gate = self.gate_tracker(tenant)
        with lane_span("gate", response_id=response_id, tenant=tenant, items=len(items)):
            tracked = await self._limiter.run(gate.score_history, response_id, items, conversation_id)
        return await self._gate(tenant, tracked, None, items, None)

    async def _gate(
        self,
        tenant: str,
        tracked: TrackedTurn,
        new_items: Sequence[Item] | None,
        history: Sequence[Item] | None,
        previous_response_id: str | None,
    ) -> GateResult:
        rec = tracked.record
        verdict = self.gate_scorer.verdict(tracked.fold, prior=tracked.rebuild)
        self.metrics.observe_turn("gate", verdict)
        earlier = self.lockout.flagged(tenant, rec.conversation_id)
        blocked_categories = [c for c in verdict.flagged_categories if self._blocks(c)]
        blocked_categories += sorted(c for c in earlier - set(blocked_categories) if self._blocks(c))
        result = GateResult(
            tenant=tenant,
            response_id=rec.response_id,
            conversation_id=rec.conversation_id,
            verdict=verdict,
            blocked=bool(blocked_categories),
            blocked_categories=blocked_categories,
        )
        if verdict.flagged_categories:
            event = FlagEvent.build(
                conversation_id=rec.conversation_id,
                response_id=rec.response_id,
                lane="gate",
                decision="block" if result.blocked else "flag",
                categories=verdict.flagged_categories,
                scores=verdict.category_scores,
                classifier_versions=self.gate_scorer.versions,
                tenant=tenant,
            )
            await self._flags.put(event)
            await self._record_flag(event, tenant)
        own = [c for c in verdict.flagged_categories if self._blocks(c)]
        refused = self.lockout.count_blocked_turn(tenant, rec.conversation_id, own) if own else None
        if refused:
            await self._refuse_conversation(tenant, rec.conversation_id, rec.response_id, refused, verdict)
        if self._turns is not None:
            await self._turns.put(
                TurnEvent.build(
                    conversation_id=rec.conversation_id,
                    response_id=rec.response_id,
                    previous_response_id=previous_response_id,
                    items=[i.to_wire() for i in _turn_delta(rec, new_items, history)],
                    full_history=history is not None,
                    tenant=tenant,
                )
            )
        elif self.monitor_scorer is not None and self.queue_monitor:
            await self._monitor_lane.put(
                _MonitorJob(
                    tenant,
                    rec.response_id,
                    rec.conversation_id,
                    new_items,
                    history,
                    previous_response_id,
                    gate_blocked=result.blocked,
                )
            )
        return result

    async def _refuse_conversation(
        self,
        tenant: str,
        conversation_id: str,
        response_id: str,
        categories: list[str],
        verdict: TurnVerdict,
    ) -> None:
        """The lock-out refused the conversation: say so with a flag event."""
        log.warning(
            "conversation %s: %s turns blocked, refusing the rest of it",
            conversation_id,
            self.config.block_limit,
        )
        event = FlagEvent.build(
            conversation_id=conversation_id,
            response_id=response_id,
            lane="gate",
            decision="block",
            categories=categories,
            scores=verdict.category_scores,
            classifier_versions=self.gate_scorer.versions,
            reason="repeated_blocks",
            tenant=tenant,
        )
        await self._flags.put(event)
        await self._record_flag(event, tenant)

    def mark_flagged(
        self, conversation_id: str, categories: Sequence[str], tenant: str = DEFAULT_TENANT
    ) -> None:
        """Refuse the conversation's later turns in `categories` (those whose action is block):
        monitor-lane flags, local or from remote workers, and repeated blocks."""
        self.lockout.mark(tenant, conversation_id, categories)

    def _blocks(self, category: str) -> bool:
        cp = self.policy.categories.get(category)
        return cp is not None and cp.action == "block"

    # -- monitor lane ----------------------------------------------------------------

    async def _monitor_batch(self, batch: list[_MonitorJob]) -> None:
        """A job and those queued behind it (up to `monitor_batch`), folded in waves."""
        for wave in waves([(job.tenant, job.conversation_id) for job in batch]):
            jobs = [batch[i] for i in wave]
            for job, outcome in zip(jobs, await self._monitor_wave(jobs), strict=True):
                if isinstance(outcome, Exception):
                    log.error("lane job failed: %r", job, exc_info=outcome)

    async def monitor_turn(self, gate: GateResult, history: Sequence[Item]) -> TurnVerdict | None:
        """Run the monitor lane on one turn now and return its verdict (None when the
        stage has no monitor classifiers), for callers that built the stage with
        `queue_monitor=False`. `history` is the turn's whole history: only what the
        monitor lane has not scored of it is folded. Flags go where the queued lane's go
        (flag sink, recording, metrics) and are enforced on the next turn."""
        self._require_running()
        if self.monitor_scorer is None:
            return None
        job = _MonitorJob(gate.tenant, gate.response_id, gate.conversation_id, None, history, None)
        [outcome] = await self._monitor_wave([job])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _monitor_wave(self, jobs: Sequence[_MonitorJob]) -> list[TurnVerdict | Exception | None]:
        """Jobs of distinct conversations, folded together: each one's verdict (None for
        an output-only job) or the error that stopped it, which stops no other."""
        scorer, step = self.monitor_scorer, self.monitor_step
        assert scorer is not None and step is not None
        trackers = [self.monitor_tracker(job.tenant) for job in jobs]
        ids = [job.response_id for job in jobs]
        with lane_span("monitor", response_id=ids[0] if len(ids) == 1 else None, response_ids=ids):
            tracked = await self._limiter.run(_score_wave, scorer, jobs, trackers)
            outcomes: list[TurnVerdict | Exception | None] = []
            for job, turn in zip(jobs, tracked, strict=True):
                if turn is None or isinstance(turn, Exception):
                    outcomes.append(turn)
                    continue
                outcome = step.judge(
                    turn.fold,
                    conversation_id=job.conversation_id,
                    response_id=job.response_id,
                    tenant=job.tenant,
                    prior=turn.rebuild,
                )
                self.metrics.observe_turn("monitor", outcome.verdict)
                if outcome.flag is not None and not job.gate_blocked:
                    self.mark_flagged(job.conversation_id, outcome.verdict.flagged_categories, job.tenant)
                    await self._flags.put(outcome.flag)
                    await self._record_flag(outcome.flag, job.tenant)
                outcomes.append(outcome.verdict)
        return outcomes

    async def _record_flag(self, event: FlagEvent, tenant: str) -> None:
        """Queue the flagged conversation for the recorder (off the response path).

        The history comes from the gate lane's record of the flagged response: it holds
        the model's outputs of earlier turns too (the monitor lane's store does not)."""
        if self.recorder is None:
            return
        try:
            record = self.gate_tracker(tenant).record(event.response_id)
        except PreviousResponseNotFound:
            log.warning("flag %s not recorded: response %s evicted", event.event_id, event.response_id)
            return
        await self.recorder.submit(event, record, tenant)

    async def flag_output(
        self, gate: GateResult, categories: list[str], scores: dict[str, float]
    ) -> FlagEvent:
        """A flag on the model's output.

        Raised while the output streams (the gateway's `OutputStreamScorer`), and again
        when the post-inference lane scores it whole, which also records it: only then
        is the output part of the conversation's record. The two share an event id when
        they name the same categories, so consumers drop the second."""
        event = FlagEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            lane="output",
            decision="flag",
            categories=categories,
            scores=scores,
            classifier_versions=self.gate_scorer.versions,
            tenant=gate.tenant,
        )
        await self._flags.put(event)
        return event

    # -- post-inference lane ---------------------------------------------------------

    async def append_output(self, gate: GateResult, output: Sequence[Item]) -> None:
        """Make the model's output part of the conversation's history, before the
        response is returned (so an immediate continuation sees it); scoring it is
        post-inference work (`complete_turn`)."""
        self._require_running()
        self.gate_tracker(gate.tenant).append_output(gate.response_id, output)
        if self.monitor_scorer is not None and self._turns is None and self.queue_monitor:
            await self._monitor_lane.put(
                _MonitorJob(gate.tenant, gate.response_id, gate.conversation_id, output, None, None, True)
            )

    async def check_output(self, gate: GateResult, output: Sequence[Item]) -> TurnVerdict:
        """Append the model's output to the history and score it now, for a caller that
        must judge the answer before it is returned (a guard API). The verdict covers
        the whole conversation, output included. `complete_turn` then queues billing and
        the output flag as usual, and finds the output already scored (cached)."""
        self._require_running()
        await self.append_output(gate, output)
        tracker = self.gate_tracker(gate.tenant)
        tracked = await self._limiter.run(tracker.score_pending, gate.response_id)
        return self.gate_scorer.verdict(tracked.fold)

    async def complete_turn(self, gate: GateResult, output: Sequence[Item], usage: Usage) -> None:
        """Queue output scoring and the billing event; returns without waiting for them.

        Appends `output` to the history first unless `append_output` already did."""
        self._require_running()
        if output and self.gate_tracker(gate.tenant).record(gate.response_id).outputs == 0:
            await self.append_output(gate, output)
        await self._post_lane.put(_PostJob(gate, output, usage))

    async def _run_post(self, jobs: list[_PostJob]) -> None:
        [job] = jobs
        with lane_span("post_inference", response_id=job.gate.response_id, tenant=job.gate.tenant):
            await self._post(job)

    async def _post(self, job: _PostJob) -> None:
        gate = job.gate
        output_ms = 0.0
        try:
            tracker = self.gate_tracker(gate.tenant)
            tracked = await self._limiter.run(tracker.score_pending, gate.response_id)
            output_ms = sum(tracked.fold.latency_ms.values())
            verdict = self.gate_scorer.verdict(tracked.fold)
            self.metrics.observe_turn("output", verdict)
            new = [c for c in verdict.flagged_categories if c not in gate.verdict.flagged_categories]
            if new:
                event = await self.flag_output(gate, new, verdict.category_scores)
                await self._record_flag(event, gate.tenant)
        finally:
            # Billing is emitted even when output scoring failed: usage must never be lost.
            await self._billing.put(self._billing_event(job, output_ms))

    @staticmethod
    def _billing_event(job: _PostJob, output_ms: float) -> BillingEvent:
        gate = job.gate
        return BillingEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            input_tokens=job.usage.input_tokens,
            cached_input_tokens=job.usage.cached_input_tokens,
            output_tokens=job.usage.output_tokens,
            reasoning_tokens=job.usage.reasoning_tokens,
            tokens_scored=gate.verdict.tokens_scored,
            classifier_ms=round(gate.verdict.latency_ms.get("total", 0.0) + output_ms, 4),
            tenant=gate.tenant,
        )


def _score_wave(
    scorer: Scorer, jobs: Sequence[_MonitorJob], trackers: Sequence[ConversationTracker | None]
) -> list[TrackedTurn | Exception | None]:
    """(In the inference pool.) Prepare each job's turn, fold them in one `fold_many`,
    record them. Output-only jobs append their output (None). If the shared fold fails,
    each turn is folded alone, so that one bad turn costs only its own verdict."""
    out: list[TrackedTurn | Exception | None] = [None] * len(jobs)
    pending: list[tuple[int, ConversationTracker, PendingTurn]] = []
    for i, (job, tracker) in enumerate(zip(jobs, trackers, strict=True)):
        assert tracker is not None
        try:
            if job.output_only:
                # Queued after the turn's own job: its record exists; the next turn folds it.
                tracker.append_output(job.response_id, job.items or ())
            elif job.history is not None:
                pending.append(
                    (i, tracker, tracker.prepare_history(job.response_id, job.history, job.conversation_id))
                )
            else:
                turn = tracker.prepare_turn(
                    job.response_id, job.items or (), job.previous_response_id, job.conversation_id
                )
                pending.append((i, tracker, turn))
        except Exception as exc:
            out[i] = exc
    try:
        folds: list[Fold | Exception] = list(scorer.fold_many([turn.request for _, _, turn in pending]))
    except Exception:
        if len(pending) == 1:
            raise
        log.exception("monitor batch of %d turns failed; folding them one by one", len(pending))
        folds = []
        for _, _, turn in pending:
            try:
                folds.append(scorer.fold_many([turn.request])[0])
            except Exception as exc:
                folds.append(exc)
    for (i, tracker, turn), fold in zip(pending, folds, strict=True):
        out[i] = fold if isinstance(fold, Exception) else tracker.commit(turn, fold)
    return out


def _turn_delta(rec: Any, new_items: Sequence[Item] | None, history: Sequence[Item] | None) -> Sequence[Item]:
    """What a remote monitor worker has not seen of a conversation: the previous
    response's output, then this turn's new items (or a resent full history)."""
    if history is not None:
        return history
    parent = rec.parent
    return [*(parent.output_items if parent is not None else ()), *(new_items or ())]

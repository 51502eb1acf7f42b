"""The monitor lane in process: the expensive classifiers, beside inference.

Turns are queued (bounded) and taken by one consumer, so each conversation's turns are
scored in order; the jobs queued meanwhile are folded together (`StageConfig.monitor_batch`:
one batched detector call across conversations, in `monitor.waves`). What the lane flags
goes to the flag sink and, for block categories, blocks the conversation's next turn.
Each queued job is noted pending (`pending_verdicts.PendingVerdicts`) until it is done, so that
the conversation's next turn, on this replica or another, waits for its verdict.
A caller that awaits the verdict itself (a proxy's during-call hook) uses `judge`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from deltaguard.items import Item
from deltaguard.lanes.flags import FlagOutlet
from deltaguard.lanes.monitor import MonitorStep, waves
from deltaguard.lanes.pending_verdicts import PendingVerdicts
from deltaguard.lanes.turn import GateResult
from deltaguard.state.scoring import Fold, Scorer, TurnVerdict
from deltaguard.state.store import ResponseRecord
from deltaguard.state.tracker import ConversationTracker, PendingTurn, TrackedTurn
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.telemetry.tracing import lane_span
from deltaguard.worker import BoundedWorker, Leftovers

log = logging.getLogger("deltaguard.stage")


@dataclass(frozen=True, slots=True)
class MonitorJob:
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
    # Set to the turn's verdict (None when the lane failed on it or closed before it),
    # for a gateway that holds the model's actions until then (`Turn.monitor_verdict`).
    verdict: asyncio.Future[TurnVerdict | None] | None = None


class MonitorLane:
    """The monitor classifiers (`scorer`; None: the lane does nothing) on their own trackers.

    `queued=False`: turns are not queued; the caller runs `judge` per turn instead.
    `verdicts`: where queued jobs are noted pending until done."""

    def __init__(
        self,
        scorer: Scorer | None,
        tracker: Callable[[str], ConversationTracker | None],
        flags: FlagOutlet,
        mark_flagged: Callable[[str, Sequence[str], str], None],
        metrics: StageMetrics,
        run: Callable[..., Awaitable[Any]],
        *,
        maxsize: int,
        batch_size: int,
        queued: bool = True,
        verdicts: PendingVerdicts | None = None,
    ) -> None:
        self.scorer = scorer
        self.step = MonitorStep(scorer) if scorer is not None else None
        self.tracker = tracker
        self.flags = flags
        self.mark_flagged = mark_flagged
        self.metrics = metrics
        self.run = run
        self.queued = queued and scorer is not None
        self.verdicts = verdicts or PendingVerdicts()
        self.verdicts.judged = self.verdicts.judged or self.queued
        self.worker: BoundedWorker[MonitorJob] = BoundedWorker(
            "lane:monitor",
            self._batch,
            maxsize=maxsize,
            batch_size=batch_size,
            log=log,
            describe=lambda jobs: f"monitor batch of {len(jobs)} jobs",
        )

    async def submit_turn(
        self, gate: GateResult, record: ResponseRecord, resent: bool
    ) -> asyncio.Future[TurnVerdict | None] | None:
        """Queue a gated turn (`record`: its new items, or the whole history `resent`).
        For a turn with untrusted input that the gate let through, returns the future of
        its verdict (else None)."""
        if not self.queued:
            return None
        parent = record.parent_id
        items, history = (None, record.items) if resent else (record.items, None)
        awaited = gate.untrusted_input and not gate.blocked
        verdict = asyncio.get_running_loop().create_future() if awaited else None
        job = MonitorJob(
            gate.tenant,
            gate.response_id,
            gate.conversation_id,
            items,
            history,
            parent,
            gate_blocked=gate.blocked,
            verdict=verdict,
        )
        await self._put(job, pending=not gate.blocked)  # a gate-blocked turn raises no flag
        return verdict

    async def submit_output(self, gate: GateResult, output: Sequence[Item]) -> None:
        if self.queued:
            job = MonitorJob(gate.tenant, gate.response_id, gate.conversation_id, output, None, None, True)
            await self._put(job, pending=True)  # the next turn's job folds this output

    async def _put(self, job: MonitorJob, pending: bool) -> None:
        if pending:
            self.verdicts.note(job.tenant, job.conversation_id, job.response_id, output=job.output_only)
        try:
            await self.worker.put(job)
        except BaseException:
            self._settle([job], None)
            raise

    async def aclose(self, deadline: float) -> Leftovers[MonitorJob]:
        left = await self.worker.aclose(deadline)
        self._settle(left, None)  # never judged: a turn waiting on one is released
        return left

    async def judge(self, gate: GateResult, history: Sequence[Item]) -> TurnVerdict | None:
        """Run the lane on one turn now and return its verdict (None without monitor
        classifiers). `history` is the turn's whole history: only what the lane has not
        scored of it is folded. Flags go where the queued lane's go."""
        if self.scorer is None:
            return None
        job = MonitorJob(gate.tenant, gate.response_id, gate.conversation_id, None, history, None)
        [outcome] = await self._wave([job])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _batch(self, batch: list[MonitorJob]) -> None:
        """A job and those queued behind it (up to `batch_size`), folded in waves. A turn
        continues a history whose output another replica may still be folding: waited for."""
        try:
            turns = {(job.tenant, job.conversation_id) for job in batch if not job.output_only}
            for tenant, conversation_id in turns:
                await self.verdicts.outputs_in(tenant, conversation_id)
            for wave in waves([(job.tenant, job.conversation_id) for job in batch]):
                jobs = [batch[i] for i in wave]
                for job, outcome in zip(jobs, await self._wave(jobs), strict=True):
                    if isinstance(outcome, Exception):
                        log.error("lane job failed: %r", job, exc_info=outcome)
                    self._settle([job], outcome if isinstance(outcome, TurnVerdict) else None)
        finally:
            self._settle(batch, None)  # a wave that failed whole: its turns have no verdict

    def _settle(self, jobs: Iterable[MonitorJob], verdict: TurnVerdict | None) -> None:
        """The jobs are done (their flags, if any, marked): their verdict futures get
        `verdict` and their pending notes go (settling a job twice changes nothing)."""
        for job in jobs:
            if job.verdict is not None and not job.verdict.done():
                job.verdict.set_result(verdict)
            self.verdicts.done(job.tenant, job.conversation_id, job.response_id, output=job.output_only)

    async def _wave(self, jobs: Sequence[MonitorJob]) -> list[TurnVerdict | Exception | None]:
        """Jobs of distinct conversations, folded together: each one's verdict (None for
        an output-only job) or the error that stopped it, which stops no other."""
        scorer, step = self.scorer, self.step
        assert scorer is not None and step is not None
        trackers = [self.tracker(job.tenant) for job in jobs]
        ids = [job.response_id for job in jobs]
        with lane_span("monitor", response_id=ids[0] if len(ids) == 1 else None, response_ids=ids):
            tracked = await self._score_per_tenant(scorer, jobs, trackers)
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
                    if outcome.blocking:
                        self.mark_flagged(job.conversation_id, outcome.blocking, job.tenant)
                    await self.flags.put(outcome.flag, job.tenant)
                outcomes.append(outcome.verdict)
        return outcomes

    async def _score_per_tenant(
        self, scorer: Scorer, jobs: Sequence[MonitorJob], trackers: Sequence[ConversationTracker | None]
    ) -> list[TrackedTurn | Exception | None]:
        """The wave folded as one job per tenant, side by side, each the work of its own
        tenant: a tenant flooding the lane is held to its share of the threads, and another
        tenant's turns neither wait behind its fold nor are charged for it. A tenant's fold
        that fails costs only its own turns their verdicts."""
        by_tenant: dict[str, list[int]] = {}
        for i, job in enumerate(jobs):
            by_tenant.setdefault(job.tenant, []).append(i)
        folds = await asyncio.gather(
            *(
                self.run(_score_wave, scorer, [jobs[i] for i in idx], [trackers[i] for i in idx], tenant=t)
                for t, idx in by_tenant.items()
            ),
            return_exceptions=True,
        )
        tracked: list[TrackedTurn | Exception | None] = [None] * len(jobs)
        for idx, fold in zip(by_tenant.values(), folds, strict=True):
            if isinstance(fold, BaseException) and not isinstance(fold, Exception):
                raise fold  # cancelled: the lane is closing
            for n, i in enumerate(idx):
                tracked[i] = fold if isinstance(fold, Exception) else fold[n]
        return tracked


def _score_wave(
    scorer: Scorer, jobs: Sequence[MonitorJob], trackers: Sequence[ConversationTracker | None]
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

"""The post-inference lane: output scoring and the billing event, after the response.

Queued once the response is complete, so that the work overlaps the client's next
request instead of delaying this one. Billing is emitted even when output scoring
fails: usage must never be lost; a job not started by the shutdown deadline keeps its
billing event (`aclose`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deltaguard.events import BillingEvent, FlagEvent
from deltaguard.items import Item
from deltaguard.journal import BillingJournal
from deltaguard.lanes.flags import FlagOutlet
from deltaguard.lanes.turn import GateResult
from deltaguard.sinks import SinkWriter
from deltaguard.state.scoring import Scorer
from deltaguard.state.tracker import ConversationTracker
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.telemetry.tracing import lane_span
from deltaguard.usage import Usage
from deltaguard.worker import BoundedWorker

log = logging.getLogger("deltaguard.stage")


@dataclass(frozen=True, slots=True)
class PostJob:
    gate: GateResult
    output: Sequence[Item]
    usage: Usage


class PostLane:
    """Scores each completed turn's output whole (on the gate classifiers) and bills it."""

    def __init__(
        self,
        scorer: Scorer,
        tracker: Callable[[str], ConversationTracker],
        flag_output: Callable[[GateResult, list[str], dict[str, float]], Awaitable[FlagEvent]],
        flags: FlagOutlet,
        billing: SinkWriter,
        metrics: StageMetrics,
        run: Callable[..., Awaitable[Any]],
        *,
        maxsize: int,
        journal: BillingJournal | None = None,
    ) -> None:
        """`journal`: where each billing event is kept from the start of its generation
        (`owe`) until the billing sink has it."""
        self.scorer = scorer
        self.tracker = tracker
        self.flag_output = flag_output
        self.flags = flags
        self.billing = billing
        self.metrics = metrics
        self.run = run
        self.journal = journal
        self.worker: BoundedWorker[PostJob] = BoundedWorker("lane:post", self._run, maxsize=maxsize, log=log)

    def owe(self, gate: GateResult, usage: Callable[[], Usage]) -> Callable[[str], None] | None:
        """A generation starts: what it will cost at least (`usage()`, the counted input) is
        journalled, so a process killed before the response completes still bills it.
        Returns what the answer's streamed text is fed to, to journal its output count as
        it grows (`deltaguard.journal.OutputMeter`). Without a journal nothing is counted
        (None)."""
        if self.journal is None:
            return None
        return self.journal.meter(billing_event(PostJob(gate, (), usage()), 0.0)).streamed

    async def put(self, gate: GateResult, output: Sequence[Item], usage: Usage) -> None:
        job = PostJob(gate, output, usage)
        if self.journal is not None:  # the usage is known: journalled before the job waits
            self.journal.note(billing_event(job, 0.0))
        await self.worker.put(job)

    async def aclose(self, deadline: float) -> list[BillingEvent]:
        """Stop at `deadline`; the billing events of the jobs never started."""
        left = await self.worker.aclose(deadline)
        return [billing_event(job, 0.0) for job in left.queued]

    async def _run(self, jobs: list[PostJob]) -> None:
        [job] = jobs
        gate = job.gate
        with lane_span("post_inference", response_id=gate.response_id, tenant=gate.tenant):
            output_ms = 0.0
            try:
                tracked = await self.run(
                    self.tracker(gate.tenant).score_pending, gate.response_id, tenant=gate.tenant
                )
                output_ms = sum(tracked.fold.latency_ms.values())
                verdict = self.scorer.verdict(tracked.fold)
                self.metrics.observe_turn("output", verdict)
                new = [c for c in verdict.flagged_categories if c not in gate.verdict.flagged_categories]
                if new:
                    event = await self.flag_output(gate, new, verdict.category_scores)
                    await self.flags.record(event, gate.tenant)
            finally:
                # Billing is emitted even when output scoring failed: usage must never be lost.
                await self.billing.put(billing_event(job, output_ms))


def billing_event(job: PostJob, output_ms: float) -> BillingEvent:
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

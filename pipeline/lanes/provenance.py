"""The action check of a turn: the model's actions against where their strings came from.

Before the gateway releases an actionable output item (a tool call of any kind), it asks
`TurnActions.check`: the item is judged (`deltaguard.classifiers.actions.judge`) against
the provenance sketch of the conversation as of the turn's input
(`deltaguard.classifiers.provenance`). An action that scores the policy's threshold
(`Policy.actions`) or more is an injection that worked: by policy it is blocked (it never
reaches the client) or flagged (released), and either way a flag event (lane "output",
reason "injected_action") names the action and the strings that untrusted content told
the model to use.

Only the model's actions need the sketch, so no request waits for it: the gate lane does
not fold it. `ProvenanceLane.begin` starts its fold as a job of its own on the inference
pool once the turn is gated, beside the upstream call, and the check awaits that job only
when an action arrives (a turn resumed without one, a guard API's output check, starts
it then). The sketch is kept per conversation position, in the lane's own store ("actions"
lane; the memory, SQLite and Redis backends keep it like any snapshot), keyed by the same
chain values as the gate's records: a turn folds only what follows the newest sketch kept
along its history (its new items and the output of the response it continues), from the
empty state when none is kept (evicted). The fold is associative, so the sketch is the
state a full fold of the history gives, however the conversation was cut into turns.

    lane = stage.provenance                        # None: the check is off
    job = lane.begin(turn.gate, record)            # at the gate; beside inference
    actions = TurnActions.of(stage, turn)          # None: the check is off
    if await actions.check(item, index=0): ...     # raises nothing; a verdict: flag it, block it if `blocks`
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deltaguard.classifiers.actions import ACTIONABLE_TYPES, ActionVerdict, judge
from deltaguard.classifiers.provenance import ProvenanceClassifier, Sketch
from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.lanes.turn import GateResult, Turn
from deltaguard.state.policy import ActionPolicy
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ResponseRecord
from deltaguard.state.tracker import ConversationTracker
from deltaguard.telemetry.metrics import StageMetrics

if TYPE_CHECKING:
    from deltaguard.lanes.stage import SafetyStage

log = logging.getLogger("deltaguard.stage")


class ProvenanceLane:
    """Folds each gated turn's provenance sketch beside inference (module docstring).

    `scorer`: the "actions" lane's classifiers (its provenance classifier is the one the
    check reads); `tracker`: the lane's tracker of a tenant, whose store keeps the sketch;
    `run`: the inference pool."""

    def __init__(
        self,
        scorer: Scorer,
        tracker: Callable[[str], ConversationTracker],
        run: Callable[..., Awaitable[Any]],
        metrics: StageMetrics,
    ) -> None:
        self.scorer = scorer
        clf = next((c for c in scorer.classifiers if isinstance(c, ProvenanceClassifier)), None)
        if clf is None:
            raise ValueError(f"the actions lane has no provenance classifier: {list(scorer.versions)}")
        self.clf = clf
        self.policy: ActionPolicy = scorer.policy.actions
        self.tracker = tracker
        self.run = run
        self.metrics = metrics
        self._jobs: set[asyncio.Task[Sketch]] = set()

    def begin(self, gate: GateResult, record: ResponseRecord) -> asyncio.Task[Sketch] | None:
        """Start folding the sketch at the end of `record` (the turn's input, as the gate
        recorded it) on the inference pool; None for a turn the gate blocked (the model
        never sees it, so it never acts on it)."""
        return None if gate.blocked else self.start(gate.tenant, record)

    def start(self, tenant: str, record: ResponseRecord) -> asyncio.Task[Sketch]:
        """The fold of the sketch at the end of `record`, as a task on the inference pool."""
        # The tenant's tracker is made here, on the event loop, never by two pool threads at once.
        job = asyncio.ensure_future(self.run(self.fold, self.tracker(tenant), record, tenant=tenant))
        self._jobs.add(job)
        job.add_done_callback(self._done)
        return job

    def fold(self, tracker: ConversationTracker, record: ResponseRecord) -> Sketch:
        """(On the inference pool.) The sketch at the end of `record`'s history: the newest
        one `tracker` kept along it, with what follows folded, and kept."""
        snapshot, fold = tracker.catch_up(record)
        if fold is not None:
            self.metrics.observe_turn("actions", self.scorer.verdict(fold))
        return Sketch.of(snapshot.states[self.clf.name])

    async def sketch(self, turn: Turn) -> Sketch:
        """The sketch the turn's actions are judged against: its job's, begun when it was
        gated, else one started now. Cancelling the wait leaves the job be (what it keeps
        serves the conversation's next turn)."""
        job = turn.sketch if turn.sketch is not None else self.start(turn.gate.tenant, turn.record)
        return await asyncio.shield(job)

    def _done(self, job: asyncio.Task[Sketch]) -> None:
        self._jobs.discard(job)
        if not job.cancelled() and job.exception() is not None:  # read: never an unretrieved error
            log.warning("the provenance sketch was not folded: %r", job.exception())

    async def drain(self) -> None:
        """Wait for every fold begun so far."""
        while self._jobs:
            await asyncio.gather(*self._jobs, return_exceptions=True)

    def cancel(self) -> None:
        """Drop the folds still running (the stage is closing past its deadline)."""
        for job in list(self._jobs):
            job.cancel()


class TurnActions:
    """The action check of one turn (module docstring)."""

    def __init__(self, lane: ProvenanceLane, stage: SafetyStage, turn: Turn) -> None:
        self.lane = lane
        self.stage = stage
        self.turn = turn
        self.clf = lane.clf
        self.policy = lane.policy
        self._sketch: Sketch | None = None
        self.verdicts: list[ActionVerdict] = []

    @classmethod
    def of(cls, stage: SafetyStage, turn: Turn) -> TurnActions | None:
        """The turn's check; None when the policy turns it off or the stage has no
        provenance classifier (its sketch is what the check reads)."""
        lane = stage.provenance
        return cls(lane, stage, turn) if lane is not None else None

    async def sketch(self) -> Sketch:
        """The conversation's sketch as of the turn's input (awaited once)."""
        if self._sketch is None:
            self._sketch = await self.lane.sketch(self.turn)
        return self._sketch

    async def judge(self, item: Mapping[str, Any]) -> ActionVerdict:
        return judge(await self.sketch(), item)

    async def check(self, item: Mapping[str, Any], index: int | str = 0) -> ActionVerdict | None:
        """Judge an actionable item about to be released; the verdict when it scores the
        threshold or more (flagged; the caller blocks it when `blocks`), else None."""
        verdict = await self.judge(item)
        if verdict.score < self.policy.threshold:
            return None
        self.verdicts.append(verdict)
        await self._flag(verdict, index)
        return verdict

    async def check_answer(self, items: Sequence[Item]) -> list[ActionVerdict]:
        """`check` every actionable item of an answer, in order; the verdicts it flagged."""
        found = []
        for index, item in enumerate(items):
            if item.kind in ACTIONABLE_TYPES:
                verdict = await self.check(item.raw, index)
                if verdict is not None:
                    found.append(verdict)
        return found

    @property
    def blocks(self) -> bool:
        return self.policy.action == "block"

    async def _flag(self, verdict: ActionVerdict, index: int | str) -> None:
        gate = self.turn.gate
        category = self.policy.category
        findings = [
            {
                "item": index,
                "category": category,
                "kind": e.risk,
                "action": verdict.name,
                "role": e.role,
                "preview": e.preview(),
                "level": e.level,
                "score": e.score,
            }
            for e in verdict.evidence
        ]
        event = FlagEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            lane="output",
            decision="block" if self.blocks else "flag",
            categories=[category],
            scores={category: verdict.score},
            classifier_versions={self.clf.name: self.clf.version},
            reason="injected_action",
            tenant=gate.tenant,
            findings=findings,
            subject=str(index),
        )
        log.warning(
            "conversation %s: %s (%s)",
            gate.conversation_id,
            verdict.reason(),
            "blocked" if self.blocks else "flagged",
        )
        await self.stage.flag(event, gate.tenant)

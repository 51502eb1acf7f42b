"""One turn through the safety stage: what every adapter holds between the gate and the end.

    turn = await stage.begin(tenant, new_items=items, previous_response_id="resp_1")
    if turn.blocked: ...                        # refused before the upstream model is called
    parent, new = turn.forward()                # what the upstream needs to continue
    async for delta in model: await turn.watch(delta)
    await turn.finish(output_items, usage, upstream_id="up_9")

A `Turn` carries its gate verdict (`gate`), the history the model is sent (`history`)
and its record in the stage's conversation store (`record`, whose `notes` hold what an
adapter keeps for the turn's continuations: tools, their digest, the upstream's id).
`watch` scores the model's text while it streams; `finish` does everything that follows
the response, once and in order: the output joins the history, the notes are kept, and
output scoring and billing are queued for the post-inference lane.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deltaguard.errors import ConversationLocked, LifecycleError, SafetyBlocked
from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.lanes.lockout import Lock
from deltaguard.lanes.output_stream import OutputStreamScorer, new_categories
from deltaguard.lanes.sanitize import SanitizedItems
from deltaguard.state.scoring import Scorer, TurnVerdict
from deltaguard.state.store import ConversationTracker, ResponseRecord
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.usage import Usage


@dataclass(frozen=True, slots=True)
class GateResult:
    tenant: str
    response_id: str
    conversation_id: str
    verdict: TurnVerdict
    blocked: bool
    blocked_categories: list[str]  # why it was blocked: this turn's or earlier flags
    # The turn's new items carry untrusted content (tool outputs, attached files): what
    # the model does with it is judged by the monitor lane before it is acted on.
    untrusted_input: bool = False
    # Categories whose spans were cut out of untrusted content (action `sanitize`): the
    # turn goes on, and the upstream is sent the sanitised items (`Turn.forward`).
    sanitized: list[str] = field(default_factory=list)
    lock: Lock | None = None  # the lock-out that refused the turn, if one did

    def refusal(self) -> SafetyBlocked:
        """The error a client gets for this blocked turn: a locked conversation says so."""
        if self.lock is not None:
            return ConversationLocked(self.blocked_categories, self.lock.why, self.lock.until)
        return SafetyBlocked(self.blocked_categories)


class OutputWatcher(Protocol):
    """What watches a turn beside the gate (the monitor lane, or a turn publisher)."""

    async def submit_output(self, gate: GateResult, output: Sequence[Item]) -> None: ...


@dataclass(frozen=True, slots=True)
class TurnLanes:
    """The stage's parts a turn uses after its gate verdict (built once, at `start()`)."""

    scorer: Scorer  # the gate lane's classifiers
    tracker: Callable[[str], ConversationTracker]  # the gate lane's tracker of a tenant
    run: Callable[..., Awaitable[Any]]  # the inference pool
    flag_output: Callable[[GateResult, list[str], dict[str, float]], Awaitable[FlagEvent]]
    watcher: OutputWatcher
    judge: Callable[[GateResult, Sequence[Item]], Awaitable[TurnVerdict | None]]
    post: Callable[[GateResult, Sequence[Item], Usage], Awaitable[None]]
    owe: Callable[[GateResult, Callable[[], Usage]], Callable[[str], None] | None]  # `Turn.generating`
    metrics: StageMetrics
    stream_classifiers: frozenset[str]  # gate classifiers that also score streamed output
    sanitized: SanitizedItems = field(default_factory=SanitizedItems)  # items sent cut


class Turn:
    """One turn: its gate verdict, history and record (see the module docstring)."""

    def __init__(
        self,
        lanes: TurnLanes,
        gate: GateResult,
        record: ResponseRecord,
        *,
        resent: bool = False,
        monitor_verdict: asyncio.Future[TurnVerdict | None] | None = None,
    ) -> None:
        """`record`: the turn's record as the gate left it; `resent`: it holds a whole
        history a stateless client resent (else the items after its parent's).
        `monitor_verdict`: the queued monitor lane's verdict on the turn, when it carries
        untrusted input (None: nothing to wait for)."""
        self._lanes = lanes
        self._monitor_verdict = monitor_verdict
        self._tracker = lanes.tracker(gate.tenant)
        self.gate = gate
        self._begun = record
        self._resent = resent
        self._history: list[Item] | None = None
        self._stream: OutputStreamScorer | None = None
        self._metered: Callable[[str], None] | None = None  # streamed text's output count, journalled
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether `finish` ran (the output joined the history; billing, if any, queued)."""
        return self._finished

    @property
    def history(self) -> list[Item]:
        """Every item the model is sent, oldest first."""
        if self._history is None:
            self._history = list(self._begun.items) if self._resent else self._begun.history()
        return self._history

    @property
    def response_id(self) -> str:
        return self.gate.response_id

    @property
    def conversation_id(self) -> str:
        return self.gate.conversation_id

    @property
    def blocked(self) -> bool:
        return self.gate.blocked

    @property
    def verdict(self) -> TurnVerdict:
        return self.gate.verdict

    @property
    def record(self) -> ResponseRecord:
        """The turn's record in the store, as of now (its output once appended)."""
        return self._tracker.record(self.gate.response_id)

    @property
    def awaits_monitor(self) -> bool:
        """The monitor lane is judging this turn's untrusted input (`monitor_verdict`)."""
        return self._monitor_verdict is not None

    async def monitor_verdict(self) -> list[str]:
        """Wait for the monitor lane's verdict on the turn's untrusted input; the block
        categories it raised ([]: nothing blocks, or nothing to wait for, or the lane
        failed on the turn, which it logs). Cancelling the wait leaves the lane's work be."""
        if self._monitor_verdict is None:
            return []
        verdict = await asyncio.shield(self._monitor_verdict)
        if verdict is None or verdict.decision != "block":  # an alert (Policy.monitor_blocking) holds nothing
            return []
        policy = self._lanes.scorer.policy.categories
        return [c for c in verdict.flagged_categories if c in policy and policy[c].action == "block"]

    @property
    def upstream_history(self) -> list[Item]:
        """`history` as the upstream model is sent it: items an injection was cut out of
        (policy action `sanitize`), in this turn or an earlier one, in their sanitised form."""
        return self._lanes.sanitized.apply(self.gate.tenant, self.history)

    def forward(self) -> tuple[str | None, list[Item]]:
        """What the upstream needs to continue this turn: the upstream's id of the response
        it continues (None: send the whole history) and the items that response has not
        seen, sanitised (`upstream_history`). Counts those items in the input-items metric."""
        if not self._resent:
            parent = self._begun.parent
            upstream = parent.notes.get("upstream_id") if parent is not None else None
            new = list(self._begun.items)
        else:
            rec, k = self._tracker.ended_at(self.history)
            upstream = rec.notes.get("upstream_id") if rec is not None else None
            new = list(self.history[k:] if upstream is not None else self.history)
        self._lanes.metrics.observe_items("input", new)
        return upstream, self._lanes.sanitized.apply(self.gate.tenant, new)

    async def watch(self, delta: str) -> list[str]:
        """Score a piece of the model's streamed text; flags (and returns) the categories
        it raises that the gate did not. Each character is scanned once."""
        if self._metered is not None:
            self._metered(delta)
        if self._stream is None:
            names = self._lanes.stream_classifiers
            self._stream = OutputStreamScorer([c for c in self._lanes.scorer.classifiers if c.name in names])
        flagged = new_categories(self._stream.feed(delta), self.gate.verdict.flagged_categories)
        if flagged:
            await self._lanes.flag_output(self.gate, flagged, dict(self._stream.scores))
        return flagged

    async def monitor(self) -> TurnVerdict | None:
        """Run the monitor lane on the turn now (None without monitor classifiers), for a
        stage built with `queue_monitor=False`; its flags are enforced on the next turn."""
        return await self._lanes.judge(self.gate, self.history)

    async def check_output(self, output: Sequence[Item]) -> TurnVerdict:
        """Append the model's output to the history and score it now, for a caller that
        must judge the answer before it is returned (a guard API). The verdict covers the
        whole conversation; `finish` then finds the output scored (cached)."""
        await self._append(output)
        tracked = await self._lanes.run(
            self._tracker.score_pending, self.gate.response_id, tenant=self.gate.tenant
        )
        return self._lanes.scorer.verdict(tracked.fold)

    def generating(self) -> None:
        """The upstream is asked for a response: until `finish` bills it, the input counted
        here is owed (kept in the billing journal when the stage has one)."""
        self._metered = self._lanes.owe(self.gate, lambda: Usage(sum(i.tokens for i in self.history), 0, 0))

    async def finish(self, output: Sequence[Item], usage: Usage | None, **notes: Any) -> None:
        """Everything that follows the response, once, in order: the output joins the
        history (before the client can continue it), `notes` join the record (an
        `upstream_id` note also indexes the record by its history, for resent histories),
        the output is counted, and output scoring and billing are queued (not awaited;
        `usage` None: nothing to bill, nothing queued)."""
        if self._finished:
            raise LifecycleError(f"turn {self.gate.response_id} is already finished")
        self._finished = True
        if output and self.record.outputs == 0:
            await self._append(output)
        if notes:
            self.annotate(index="upstream_id" in notes, **notes)
        self._lanes.metrics.observe_items("output", output)
        if usage is not None:
            await self._lanes.post(self.gate, output, usage)

    def annotate(self, *, index: bool = False, **notes: Any) -> None:
        """Keep `notes` on the turn's record, for its continuations; `index`: a resent
        history that ends where the record does finds it (`ConversationTracker.ended_at`)."""
        self._tracker.annotate(self.gate.response_id, notes, index=index)

    async def _append(self, output: Sequence[Item]) -> None:
        """The output joins the history, unscored (cheap), and goes to the monitor lane."""
        self._tracker.append_output(self.gate.response_id, output)
        await self._lanes.watcher.submit_output(self.gate, output)

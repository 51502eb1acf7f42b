"""The gate lane: the cheap classifiers, awaited before the upstream model is called.

A block category over its threshold blocks the turn, and so does a category flagged
earlier in the conversation (`lockout.ConversationLockout`); what the gate flags goes
to the flag sink. A conversation that keeps sending blocked turns is refused whole.

The gate's decision is one job on the inference pool (`GateLane.decide`): the tools and
instructions the turn inherits, the fold, the verdict, the lock-out's and earlier flags'
say, and the record's notes. The turn's state is read and written there once, and a
shared backend's round trips wait on a pool thread, not on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.lanes.flags import FlagOutlet
from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.lanes.sanitize import SanitizedItems, is_untrusted
from deltaguard.lanes.turn import GateResult, TurnContext
from deltaguard.state.scoring import Scorer, TurnVerdict, findings_json
from deltaguard.state.store import ResponseRecord
from deltaguard.state.tracker import ConversationTracker, TrackedTurn
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.telemetry.tracing import lane_span

log = logging.getLogger("deltaguard.stage")


@dataclass(frozen=True, slots=True)
class GateAsk:
    """What a turn brings to the gate (`SafetyStage.begin`'s arguments)."""

    tenant: str
    response_id: str
    new_items: Sequence[Item] = ()
    history: Sequence[Item] | None = None  # a whole history resent (a stateless client)
    previous_response_id: str | None = None
    conversation_id: str | None = None
    client: str = ""  # the end-user the request names: blocked first turns count per client
    tools: list[dict[str, Any]] | None = None
    instructions: str | None = None


@dataclass(frozen=True, slots=True)
class Gated:
    """The gate's decision on a turn, and what the turn is built from."""

    gate: GateResult
    record: ResponseRecord  # as the gate left it, its notes written
    # every item of the conversation, this turn's last, when deciding read it (else None:
    # the turn reads it if it needs it, a guard API turn never does)
    history: list[Item] | None
    context: TurnContext  # the request's tools and instructions, as judged
    parent_notes: dict[str, Any]  # the notes of the response it continues ({}: none)
    flags: list[FlagEvent]  # raised by the gate, queued by `check`


@dataclass(frozen=True, slots=True)
class _Scored:
    """A turn folded and recorded, not yet decided on (`GateLane.decide`)."""

    ask: GateAsk
    tracker: ConversationTracker
    tracked: TrackedTurn
    verdict: TurnVerdict
    context: TurnContext
    parent_notes: dict[str, Any]

    @property
    def record(self) -> ResponseRecord:
        return self.tracked.record


class GateLane:
    """Scores a turn's new items (or a resent history) and decides whether it is blocked."""

    def __init__(
        self,
        scorer: Scorer,
        tracker: Callable[[str], ConversationTracker],
        lockout: ConversationLockout,
        flags: FlagOutlet,
        metrics: StageMetrics,
        run: Callable[..., Awaitable[Any]],
        sanitized: SanitizedItems | None = None,
    ) -> None:
        self.scorer = scorer
        self.sanitized = sanitized or SanitizedItems()
        self.tracker = tracker
        self.lockout = lockout
        self.flags = flags
        self.metrics = metrics
        self.run = run

    def blocks(self, category: str) -> bool:
        return self._action(category) == "block"

    def _action(self, category: str) -> str | None:
        cp = self.scorer.policy.categories.get(category)
        return cp.action if cp is not None else None

    async def check(self, ask: GateAsk, tracker: ConversationTracker) -> Gated:
        """Score the turn and decide on it: one job on the inference pool (`decide`), so
        the state it reads and writes (a shared backend's round trips included) stays off
        the event loop. When monitor verdicts are pending on its conversation, the job
        stops after the fold; the turn waits for them here, then a second job decides.
        The gate's flags are queued once it has decided."""
        count = len(ask.history if ask.history is not None else ask.new_items)
        with lane_span("gate", response_id=ask.response_id, tenant=ask.tenant, items=count):
            decided = await self.run(self.decide, ask, tracker, tenant=ask.tenant)
            if isinstance(decided, _Scored):
                await self.lockout.verdicts.wait(ask.tenant, decided.record.conversation_id)
                decided = await self.run(self._judge, decided, tenant=ask.tenant)
        for event in decided.flags:
            await self.flags.put(event, ask.tenant)
        return decided

    def decide(self, ask: GateAsk, tracker: ConversationTracker) -> Gated | _Scored:
        """(On the inference pool.) The turn folded and recorded, its verdict, the lock-out's
        and earlier flags' say, its record's notes; `_Scored` when monitor verdicts are
        still pending on its conversation (their flags decide too: `check` waits)."""
        scored = self._score(ask, tracker)
        if self.lockout.verdicts.pending(ask.tenant, scored.record.conversation_id):
            return scored
        return self._judge(scored)

    def _score(self, ask: GateAsk, tracker: ConversationTracker) -> _Scored:
        prev = ask.previous_response_id
        parent_notes = tracker.record(prev).notes if prev else {}
        context = TurnContext.of(parent_notes, ask.tools, ask.instructions, continues=prev is not None)
        if ask.history is not None:
            resent = [*context.items, *ask.history]
            tracked = tracker.score_history(ask.response_id, resent, ask.conversation_id)
        else:
            new = [*context.items, *ask.new_items]
            tracked = tracker.score_turn(ask.response_id, new, prev, ask.conversation_id)
        verdict = self.scorer.verdict(tracked.fold, prior=tracked.rebuild)
        self.metrics.observe_turn("gate", verdict)
        return _Scored(ask, tracker, tracked, verdict, context, parent_notes)

    def _judge(self, scored: _Scored) -> Gated:
        """(On the inference pool.) What refuses the scored turn, its flags, its record's notes."""
        ask, rec, verdict = scored.ask, scored.tracked.record, scored.verdict
        tenant, resent = ask.tenant, ask.history is not None
        # The items this turn scored: a resent history's unseen suffix, else its new items;
        # and the whole history, read only when a decision needs it (it is the whole
        # conversation: a turn's cost stays its delta's).
        k = scored.tracked.fold.before.length if resent else 0
        fresh = rec.items[k:]
        first_turn = k == 0 if resent else rec.parent_id is None
        read: list[list[Item]] = []

        def whole() -> list[Item]:
            if not read:
                read.append(list(rec.items) if resent else rec.history())
            return read[0]

        def before() -> Sequence[Item]:
            history = whole()
            return history[: len(history) - len(fresh)]

        lock = self.lockout.lock_of(
            tenant, rec.conversation_id, whole, client=ask.client, first_turn=first_turn
        )
        earlier = self.lockout.flagged(tenant, rec.conversation_id)
        blocked_categories = [c for c in verdict.flagged_categories if self.blocks(c)]
        blocked_categories += sorted(c for c in earlier - set(blocked_categories) if self.blocks(c))
        if lock is not None:
            blocked_categories += [c for c in lock.categories if c not in blocked_categories]
        sanitizing = [c for c in verdict.flagged_categories if self._action(c) == "sanitize"]
        if sanitizing:  # cut out where they can be; the others block
            uncut = self.sanitized.sanitize(tenant, fresh, verdict.findings, sanitizing, whole())
            blocked_categories += [c for c in uncut if c not in blocked_categories]
            sanitizing = [c for c in sanitizing if c not in uncut]
        gate = GateResult(
            tenant=tenant,
            response_id=rec.response_id,
            conversation_id=rec.conversation_id,
            verdict=verdict,
            blocked=bool(blocked_categories),
            blocked_categories=blocked_categories,
            untrusted_input=any(is_untrusted(i) for i in fresh),
            sanitized=sanitizing,
            lock=lock,
        )
        flags = []
        if verdict.flagged_categories:
            decision: Literal["flag", "block"] = "block" if gate.blocked else "flag"
            reason = "sanitized" if sanitizing and not gate.blocked else None
            flags.append(self._flag_event(gate, verdict.flagged_categories, decision, reason=reason))
        own = [c for c in verdict.flagged_categories if self.blocks(c)] if lock is None else []
        refused = self.lockout.count_blocked_turn(tenant, rec.conversation_id, own, before) if own else None
        if own and first_turn and self.lockout.count_blocked_first_turn(tenant, ask.client, own):
            log.warning("client %r of tenant %s: repeated blocked first turns, locked", ask.client, tenant)
        if refused:
            log.warning(
                "conversation %s: %s turns blocked, refusing the rest of it",
                rec.conversation_id,
                self.lockout.block_limit,
            )
            flags.append(self._flag_event(gate, refused, "block", reason="repeated_blocks"))
        # The gate verdict is a note on the record, so that the turn can be resumed (a guard
        # API's output check) by this process or another on the same state backend.
        notes = {"gate": gate.to_json(), **scored.context.notes}
        rec = scored.tracker.annotate(ask.response_id, notes, record=rec)
        return Gated(gate, rec, read[0] if read else None, scored.context, scored.parent_notes, flags)

    def _flag_event(
        self, gate: GateResult, categories: list[str], decision: Literal["flag", "block"], **extra: Any
    ) -> FlagEvent:
        return FlagEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            lane="gate",
            decision=decision,
            categories=categories,
            scores=gate.verdict.category_scores,
            classifier_versions=self.scorer.versions,
            tenant=gate.tenant,
            findings=findings_json(gate.verdict.findings),
            **extra,
        )

    async def flag_output(
        self, gate: GateResult, categories: list[str], scores: dict[str, float]
    ) -> FlagEvent:
        """A flag on the model's output.

        Raised while the output streams (`Turn.watch`), and again when the post-inference
        lane scores it whole, which also records it: only then is the output part of the
        conversation's record. The two share an event id when they name the same
        categories, so consumers drop the second."""
        event = FlagEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            lane="output",
            decision="flag",
            categories=categories,
            scores=scores,
            classifier_versions=self.scorer.versions,
            tenant=gate.tenant,
        )
        await self.flags.put(event, gate.tenant, record=False)
        return event

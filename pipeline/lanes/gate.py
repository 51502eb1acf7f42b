"""The gate lane: the cheap classifiers, awaited before the upstream model is called.

A block category over its threshold blocks the turn, and so does a category flagged
earlier in the conversation (`lockout.ConversationLockout`); what the gate flags goes
to the flag sink. A conversation that keeps sending blocked turns is refused whole.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.lanes.flags import FlagOutlet
from deltaguard.lanes.lockout import ConversationLockout
from deltaguard.lanes.sanitize import SanitizedItems, is_untrusted
from deltaguard.lanes.turn import GateResult
from deltaguard.state.scoring import Scorer, findings_json
from deltaguard.state.store import ResponseRecord
from deltaguard.state.tracker import ConversationTracker
from deltaguard.telemetry.metrics import StageMetrics
from deltaguard.telemetry.tracing import lane_span

log = logging.getLogger("deltaguard.stage")


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

    async def check(
        self,
        tenant: str,
        response_id: str,
        new_items: Sequence[Item] | None,
        history: Sequence[Item] | None,
        previous_response_id: str | None,
        conversation_id: str | None,
        client: str = "",
        tracker: ConversationTracker | None = None,
    ) -> tuple[GateResult, ResponseRecord]:
        """Score the turn and record it; (its gate result, its record). `client`: the
        end-user the request names (blocked first turns count per tenant and client).
        `tracker`: the tenant's, when the caller holds it."""
        tracker = tracker if tracker is not None else self.tracker(tenant)
        count = len(history if history is not None else new_items or ())
        with lane_span("gate", response_id=response_id, tenant=tenant, items=count):
            if history is not None:
                tracked = await self.run(
                    tracker.score_history, response_id, history, conversation_id, tenant=tenant
                )
            else:
                tracked = await self.run(
                    tracker.score_turn,
                    response_id,
                    new_items,
                    previous_response_id,
                    conversation_id,
                    tenant=tenant,
                )
        rec = tracked.record
        verdict = self.scorer.verdict(tracked.fold, prior=tracked.rebuild)
        self.metrics.observe_turn("gate", verdict)
        # The items this turn scored: a resent history's unseen suffix, else its new items;
        # and the history before them (read only when needed: it is the whole conversation).
        k = tracked.fold.before.length if history is not None else 0
        fresh = rec.items[k:] if history is not None else rec.items
        first_turn = k == 0 if history is not None else rec.parent is None

        def before() -> Sequence[Item]:
            if history is not None:
                return rec.items[:k]
            return rec.parent.history() if rec.parent is not None else ()

        lock = self.lockout.lock_of(
            tenant, rec.conversation_id, lambda: [*before(), *fresh], client=client, first_turn=first_turn
        )
        earlier = await self.lockout.judged_flags(tenant, rec.conversation_id)  # pending verdicts in
        blocked_categories = [c for c in verdict.flagged_categories if self.blocks(c)]
        blocked_categories += sorted(c for c in earlier - set(blocked_categories) if self.blocks(c))
        if lock is not None:
            blocked_categories += [c for c in lock.categories if c not in blocked_categories]
        sanitizing = [c for c in verdict.flagged_categories if self._action(c) == "sanitize"]
        if sanitizing:  # cut out where they can be; the others block
            whole = rec.items if history is not None else rec.history()
            uncut = self.sanitized.sanitize(tenant, fresh, verdict.findings, sanitizing, whole)
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
        if verdict.flagged_categories:
            decision: Literal["flag", "block"] = "block" if gate.blocked else "flag"
            reason = "sanitized" if sanitizing and not gate.blocked else None
            await self._flag(gate, verdict.flagged_categories, decision, reason=reason)
        own = [c for c in verdict.flagged_categories if self.blocks(c)] if lock is None else []
        refused = self.lockout.count_blocked_turn(tenant, rec.conversation_id, own, before) if own else None
        if own and first_turn and self.lockout.count_blocked_first_turn(tenant, client, own):
            log.warning("client %r of tenant %s: repeated blocked first turns, locked", client, tenant)
        if refused:
            log.warning(
                "conversation %s: %s turns blocked, refusing the rest of it",
                rec.conversation_id,
                self.lockout.block_limit,
            )
            await self._flag(gate, refused, "block", reason="repeated_blocks")
        return gate, rec

    async def _flag(
        self, gate: GateResult, categories: list[str], decision: Literal["flag", "block"], **extra: Any
    ) -> None:
        event = FlagEvent.build(
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
        await self.flags.put(event, gate.tenant)

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

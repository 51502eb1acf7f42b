"""The action check of a turn: the model's actions against where their strings came from.

Before the gateway releases an actionable output item (a tool call of any kind), it asks
`TurnActions.check`: the item is judged (`deltaguard.classifiers.actions.judge`) against
the provenance sketch of the conversation as of the turn's input, which the gate lane
folded with the other classifiers' states (`deltaguard.classifiers.provenance`). An
action that scores the policy's threshold (`Policy.actions`) or more is an injection that
worked: by policy it is blocked (it never reaches the client) or flagged (released), and
either way a flag event (lane "output", reason "injected_action") names the action and
the strings that untrusted content told the model to use.

The sketch is the gate snapshot's state at the end of the turn's input: the same state
full rescoring of the history would give (the fold is associative), so the check's
verdicts do not depend on how the conversation was cut into turns. A snapshot evicted
from the store is rebuilt from the newest one still kept, folding only the provenance
classifier over the items after it.

    actions = TurnActions.of(stage, turn)          # None: the check is off
    verdict = actions.judge(item)
    if await actions.check(item, index=0): ...     # raises nothing; True: block it
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from deltaguard.classifiers.actions import ACTIONABLE_TYPES, ActionVerdict, judge
from deltaguard.classifiers.base import State
from deltaguard.classifiers.provenance import ProvenanceClassifier, Sketch
from deltaguard.events import FlagEvent
from deltaguard.items import Item
from deltaguard.lanes.stage import SafetyStage, Turn
from deltaguard.state.policy import ActionPolicy
from deltaguard.state.store import ConversationStore, ResponseRecord

log = logging.getLogger("deltaguard.stage")


def provenance_state(
    store: ConversationStore | None, rec: ResponseRecord, clf: ProvenanceClassifier
) -> State:
    """`clf`'s state at the end of `rec`'s history: the newest snapshot's, with the items
    after it folded (all of them, from the empty state, when none is kept)."""
    pending = []
    state = None
    for node, i in rec.positions():
        snapshot = store.snapshots.get(node.chains[i]) if store is not None else None
        if snapshot is not None and clf.name in snapshot.states:
            state = snapshot.states[clf.name]
            break
        pending.append(node.items[i])
    if state is None:
        state = clf.initial_state()
    pending.reverse()
    return clf.update(state, pending).state if pending else state


class TurnActions:
    """The action check of one turn (module docstring)."""

    def __init__(
        self, stage: SafetyStage, turn: Turn, clf: ProvenanceClassifier, policy: ActionPolicy
    ) -> None:
        self.stage = stage
        self.turn = turn
        self.clf = clf
        self.policy = policy
        self._sketch: Sketch | None = None
        self.verdicts: list[ActionVerdict] = []

    @classmethod
    def of(cls, stage: SafetyStage, turn: Turn) -> TurnActions | None:
        """The turn's check; None when the policy turns it off or the stage's gate lane has
        no provenance classifier (its state is what the check reads)."""
        policy = stage.policy.actions
        clf = next((c for c in stage.gate_scorer.classifiers if isinstance(c, ProvenanceClassifier)), None)
        if policy.action == "off" or clf is None:
            return None
        return cls(stage, turn, clf, policy)

    @property
    def sketch(self) -> Sketch:
        if self._sketch is None:
            store = self.stage.stores.get(("gate", self.turn.gate.tenant))
            self._sketch = Sketch.of(provenance_state(store, self.turn.record, self.clf))
        return self._sketch

    def judge(self, item: Mapping[str, Any]) -> ActionVerdict:
        return judge(self.sketch, item)

    async def check(self, item: Mapping[str, Any], index: int | str = 0) -> ActionVerdict | None:
        """Judge an actionable item about to be released; the verdict when it scores the
        threshold or more (flagged; the caller blocks it when `blocks`), else None."""
        verdict = self.judge(item)
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

"""The monitor step, written once: a turn's fold judged, and its flag event built.

The embedded monitor lane (`SafetyStage`, and through it the LiteLLM adapter) and the
Kafka worker (`deltaguard.kafka.monitor.MonitorLane`) differ only in where a
conversation's snapshot lives (the in-process store, a changelog-backed table); both
fold the turn's delta after it and hand the fold to `MonitorStep.judge`, so the verdict
and the flag event are the same whichever runs it. Both take turns in batches and fold
each of the batch's `waves` in one `Scorer.fold_many`.

>>> from deltaguard.classifiers.secrets import SecretsClassifier
>>> from deltaguard.parsing import parse_item
>>> from deltaguard.state.scoring import Scorer
>>> step = MonitorStep(Scorer([SecretsClassifier()]))
>>> fold = step.scorer.fold(step.scorer.empty(), [parse_item({"role": "user", "content": "hi"})])
>>> step.judge(fold, conversation_id="c1", response_id="r1").flag is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from deltaguard.events import DEFAULT_TENANT, FlagEvent
from deltaguard.state.scoring import Fold, Scorer, TurnVerdict, findings_json


@dataclass(frozen=True, slots=True)
class MonitorOutcome:
    verdict: TurnVerdict
    flag: FlagEvent | None  # None when nothing was flagged
    # The categories this turn's evidence blocks the conversation in (Policy.monitor_blocking);
    # a verdict flagged with none of them alerts without blocking (decision "flag").
    blocking: tuple[str, ...] = ()


class MonitorStep:
    """Judges folds of the monitor classifiers (`scorer`) and builds their flag events."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def judge(
        self,
        fold: Fold,
        *,
        conversation_id: str,
        response_id: str,
        tenant: str = DEFAULT_TENANT,
        prior: Fold | None = None,
    ) -> MonitorOutcome:
        """The verdict of the conversation after `fold` and, when it flags, the flag event.

        `prior` is work done for the same turn before `fold` (a rebuild of an evicted
        snapshot): its cost counts in the verdict's latency and tokens."""
        verdict = self.scorer.verdict(fold, prior=prior)
        if not verdict.flagged_categories:
            return MonitorOutcome(verdict, None)
        blocking = tuple(
            self.scorer.policy.monitor_blocking(verdict.flagged_categories, fold.item_scores, fold.channels)
        )
        if verdict.decision == "block" and not blocking:
            verdict = dataclasses.replace(verdict, decision="flag")
        flag = FlagEvent.build(
            conversation_id=conversation_id,
            response_id=response_id,
            lane="monitor",
            decision="block" if verdict.decision == "block" else "flag",
            categories=verdict.flagged_categories,
            scores=verdict.category_scores,
            classifier_versions=self.scorer.versions,
            tenant=tenant,
            findings=findings_json(verdict.findings),
        )
        return MonitorOutcome(verdict, flag, blocking)


def waves(keys: Sequence[Hashable]) -> list[list[int]]:
    """A batch's positions grouped so that no group holds one key (conversation) twice.

    The k-th turn of every conversation goes to group k, in batch order. Turns of
    different conversations are independent, so a group folds in one call; a
    conversation's later turn resumes from its earlier one's snapshot, a group later.

    >>> waves(["a", "b", "a", "c", "a"])
    [[0, 1, 3], [2], [4]]
    """
    groups: list[list[int]] = []
    seen: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        k = seen.get(key, 0)
        seen[key] = k + 1
        if k == len(groups):
            groups.append([])
        groups[k].append(i)
    return groups

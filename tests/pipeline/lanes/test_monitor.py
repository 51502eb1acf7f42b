"""MonitorStep: one verdict and one flag event for a fold, whoever runs it."""

from __future__ import annotations

from deltaguard.lanes.monitor import MonitorStep
from deltaguard.parsing import parse_item
from deltaguard.state.scoring import Scorer
from tests.support.toy import ItemCounter

SECRET = parse_item({"role": "user", "content": "BOOM"})
BENIGN = parse_item({"role": "user", "content": "hello"})


def test_nothing_flagged_means_no_event():
    step = MonitorStep(Scorer([ItemCounter()]))
    fold = step.scorer.fold(step.scorer.empty(), [BENIGN])
    outcome = step.judge(fold, conversation_id="c", response_id="r")
    assert outcome.flag is None and outcome.verdict.decision == "allow"


def test_a_flag_event_carries_the_verdict_and_a_stable_id():
    step = MonitorStep(Scorer([ItemCounter()]))
    fold = step.scorer.fold(step.scorer.empty(), [BENIGN, SECRET])
    first = step.judge(fold, conversation_id="c", response_id="r", tenant="acme")
    again = step.judge(fold, conversation_id="c", response_id="r", tenant="acme")
    assert first.flag is not None and again.flag is not None
    assert first.flag.lane == "monitor" and first.flag.tenant == "acme"
    assert first.flag.categories == first.verdict.flagged_categories == ["secrets"]
    assert first.flag.decision == "block"  # secrets block by default
    assert first.flag.event_id == again.flag.event_id
    assert first.flag.classifier_versions == step.scorer.versions


def test_a_rebuild_counts_in_the_verdicts_cost():
    step = MonitorStep(Scorer([ItemCounter()]))
    rebuild = step.scorer.fold(step.scorer.empty(), [BENIGN])
    fold = step.scorer.fold(rebuild.after, [BENIGN])
    alone = step.judge(fold, conversation_id="c", response_id="r").verdict
    with_prior = step.judge(fold, conversation_id="c", response_id="r", prior=rebuild).verdict
    assert with_prior.tokens_scored == alone.tokens_scored + rebuild.tokens["counter"]

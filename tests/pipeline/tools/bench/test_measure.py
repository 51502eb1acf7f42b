"""What the benchmark measures: delta on the new items, full on the history, the raw floor."""

from __future__ import annotations

from deltaguard.state.scoring import Scorer
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.bench.measure import TimedClassifier, bench_conversation, timed_scorer
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import parse_conversation
from tests.support.toy import ItemCounter


def test_delta_scores_only_the_new_items_and_full_the_history(tiny):
    by_turn = {}
    for sample in tiny.samples:
        by_turn.setdefault(sample.index, []).append(sample)
    for index, samples in by_turn.items():
        for s in samples:
            # The rule classifiers add at most their 512-character window to the new items.
            assert s.delta_tokens["lexical"] <= s.new_tokens
            assert s.delta_tokens["secrets"] >= s.new_tokens
            if s.full_tokens is not None and index > 1:
                assert s.full_tokens["secrets"] > s.delta_tokens["secrets"]


def test_the_floor_runs_each_classifier_on_exactly_the_new_items():
    counter = ItemCounter()
    scorer = timed_scorer(Scorer([counter]), clock=lambda: 0.0)
    conv = parse_conversation(agent_rollout("c", 5, 20), "<t>", 0)
    samples = bench_conversation(conv, scorer, ConversationTracker(scorer), stride=10**6)
    assert [s.full_ms is not None for s in samples] == [True, False, False, False, True]
    items = [len(t.input) for t in conv.turns]
    outputs = [len(t.output) for t in conv.turns]
    # delta input + floor input, delta output + floor output, and the two full refolds
    full = sum(items) + sum(outputs[:4]) + items[0]
    assert counter.items_seen == 2 * sum(items) + 2 * sum(outputs) + full
    assert isinstance(scorer.classifiers[0], TimedClassifier)

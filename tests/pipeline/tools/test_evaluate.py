"""`deltaguard eval`: metrics on labelled transcripts, and thresholds for a target FPR."""

from __future__ import annotations

import json

import pytest

from deltaguard.cli import main
from deltaguard.state.policy import load_policy
from deltaguard.tools.evaluate import evaluate, roc_auc, threshold_for_fpr, wilson


def test_metrics_per_category_and_the_turn_that_caught_it(scorer, labelled):
    result = evaluate(labelled, scorer, target_fpr=0.1)
    assert len(result.conversations) == 26  # the unlabelled line is not scored
    report = result.reports["prompt_injection"].to_json()
    assert (report["positives"], report["negatives"]) == (6, 20)
    assert report["recall"] == 1.0 and report["false_positive_rate"] == 0.0
    assert report["roc_auc"] == 1.0
    assert report["turns_to_catch"] == [0] * 6  # caught at the labelled turn
    assert 0.0 < report["threshold_for_target"] <= 0.5


def test_the_policy_file_meets_the_target_on_the_same_data(scorer, labelled, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["eval", str(labelled), "--target-fpr", "0.1", "--out", str(out), "--no-plots"])
    assert code == 0
    assert "prompt_injection" in capsys.readouterr().out
    policy = load_policy(out / "policy.json")  # the file `serve --policy` reads
    threshold = policy.threshold("prompt_injection")
    assert policy.categories["prompt_injection"].action == "block"
    again = evaluate(labelled, scorer.__class__(scorer.classifiers, policy), target_fpr=0.1)
    assert again.reports["prompt_injection"].to_json()["false_positive_rate"] <= 0.1
    assert again.reports["prompt_injection"].to_json()["recall"] == 1.0
    assert json.loads((out / "eval.json").read_text())["categories"]["prompt_injection"]["roc_auc"] == 1.0
    assert threshold > 0.0


def test_bad_labels_are_named_and_the_rest_is_scored(scorer, labelled, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        labelled.read_text() + json.dumps({"id": "x", "turns": [], "labels": {"categories": "pii"}}) + "\n"
    )
    code = main(["eval", str(bad), "--target-fpr", "0.1", "--out", str(tmp_path / "o"), "--no-plots"])
    assert code == 1
    assert "labels.categories: expected a list of category names" in capsys.readouterr().err


def test_too_few_negatives_give_no_threshold():
    assert threshold_for_fpr([0.1] * 50, 0.01) is None
    assert threshold_for_fpr([0.1] * 99 + [0.9], 0.01) == pytest.approx(0.100001)  # 0.9 may pass: 1%
    assert threshold_for_fpr([0.1] * 98 + [0.9, 0.8], 0.01) == pytest.approx(0.800001)
    assert threshold_for_fpr([0.2] * 200, 0.01) == pytest.approx(0.200001)


def test_auc_and_intervals():
    assert roc_auc([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert roc_auc([0.5], [0.5]) == 0.5
    low, high = wilson(0, 20)
    assert low == 0.0 and 0.1 < high < 0.2

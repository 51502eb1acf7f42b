from __future__ import annotations

import numpy as np
import pytest

from eval import detector_compare


def test_auc_counts_ties_half():
    assert detector_compare.auc(np.array([0.9, 0.8]), np.array([0.1, 0.2])) == 1.0
    assert detector_compare.auc(np.array([0.5]), np.array([0.5])) == 0.5
    assert detector_compare.auc(np.array([0.1]), np.array([0.9, 0.2])) == 0.0


def test_each_source_is_ranked_by_its_head_against_benign_rows_of_its_channel():
    rows = [
        {"source": "s-labs", "label": "injection", "channel": "user"},
        {"source": "chat", "label": "benign", "channel": "user"},
        {"source": "agentdojo", "label": "injection", "channel": "tool"},
        {"source": "tool", "label": "benign", "channel": "tool"},
        {"source": "pyrit", "label": "jailbreak", "channel": "user"},
    ]
    #               direct jailbreak indirect
    p = np.array(
        [
            [0.9, 0.0, 0.0],  # s-labs: direct head over the chat row's 0.2
            [0.2, 0.5, 0.9],
            [0.0, 0.0, 0.1],  # agentdojo: indirect head under the benign tool row's 0.3
            [0.9, 0.0, 0.3],
            [0.0, 0.4, 0.0],  # pyrit: jailbreak head under the chat row's 0.5
        ]
    )
    assert detector_compare.ranking(p, rows) == {
        "agentdojo/injection": 0.0,
        "pyrit/jailbreak": 0.0,
        "s-labs/injection": 1.0,
    }


def test_the_report_puts_both_releases_side_by_side():
    one = {
        "thresholds": {"prompt_injection": 0.9, "jailbreak": 0.8, "indirect_injection": 0.7},
        "test": {
            "recall": {"s-labs/injection": {"n": 2, "recall": 0.5}},
            "flag_rate": {"chat": {"n": 9, "rate": 0.0}},
        },
        "auc": {"s-labs/injection": 0.75},
    }
    lines = detector_compare.report({"detector": one, "detector-v2": one})
    assert "| | detector | detector-v2 |" in lines
    assert "| s-labs/injection | 50.0% (AUC 0.750) | 50.0% (AUC 0.750) |" in lines
    assert (
        "| thresholds (direct / jailbreak / indirect) | 0.9000 / 0.8000 / 0.7000 | 0.9000 / 0.8000 / 0.7000 |"
        in lines
    )
    with pytest.raises(KeyError):
        detector_compare.report({"detector": one, "x": {**one, "auc": {}}})

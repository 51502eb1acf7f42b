"""The gate recipe's operating point raised without a refit (train_lexical_gate --floors)."""

import numpy as np

from training.train_lexical_gate import READING, raise_entry


def test_thresholds_rise_to_the_floors_and_never_fall():
    entry = {
        "thresholds": {"prompt_injection": 0.98, "jailbreak": 0.86},
        "untrusted_thresholds": {"prompt_injection": 0.998, "jailbreak": 0.93},
    }
    kinds = ["coding", "agent_files", "agent_files"]
    floors = {
        "user": ({"prompt_injection": 0.5, "jailbreak": 0.2}, kinds, np.zeros((3, 2))),
        "tool": (
            {"prompt_injection": 0.9, "jailbreak": 0.98531234},
            kinds,
            np.array([[0.1, 0.2], [0.2, 0.9853123], [0.3, 0.99]]),
        ),
    }
    raise_entry(entry, floors)
    assert entry["thresholds"] == {"prompt_injection": 0.98, "jailbreak": 0.86}
    assert entry["untrusted_thresholds"] == {"prompt_injection": 0.998, "jailbreak": 0.985313}
    # the metrics were measured at the thresholds before, and a second raise keeps that record
    before = {"prompt_injection": 0.998, "jailbreak": 0.93}
    assert entry["metrics_measured_at"]["untrusted_thresholds"] == before
    assert entry["validation_conversations_flagged"]["tool"] == {"agent_files": 0.5, "coding": 0.0}
    # the floors were read as the recipe reads: the entry now serves the model so
    assert entry["reading"] == READING == 4
    raise_entry(entry, floors)
    assert entry["metrics_measured_at"]["untrusted_thresholds"] == before

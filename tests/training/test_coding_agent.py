"""The detector's coding-agent rows (training/coding_agent.py)."""

from collections import defaultdict

from training.coding_agent import ACTIONS, CARRIERS, coding_agent_rows, triple


def test_each_carrier_comes_clean_injected_and_with_a_benign_note_in_one_group():
    rows = coding_agent_rows(per_carrier=5)
    assert rows == coding_agent_rows(per_carrier=5)  # the same rows every build
    by_group = defaultdict(list)
    for r in rows:
        by_group[r["group"]].append(r)
    assert len(by_group) == 5 * len(CARRIERS)
    for group in by_group.values():
        clean, attack, twin = group
        assert len({r["split"] for r in group}) == 1  # never straddles a split
        assert (clean["label"], attack["label"], twin["label"]) == ("benign", "injection", "benign")
        assert (clean["fp_set"], twin["fp_set"]) == ("tool", "lookalike")
        assert attack["family"] in ACTIONS and all(r["channel"] == "tool" for r in group)
    assert {r["family"] for r in rows if r["label"] == "benign" and r["fp_set"] == "tool"} == set(CARRIERS)


def shared(a: str, b: str) -> int:
    """The length of the common prefix of a and b."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def test_the_three_differ_only_at_the_slot():
    for kind, make in CARRIERS.items():
        clean, attack, twin, _ = triple(make, f"t:{kind}")
        for other in (attack, twin):
            head = shared(clean, other)
            tail = min(shared(clean[::-1], other[::-1]), len(clean) - head)
            # What the clean carrier has between the shared ends is at most the slot's syntax.
            assert len(clean) - head - tail < 12, (kind, clean[head : len(clean) - tail])
            assert len(other) > len(clean) + 20

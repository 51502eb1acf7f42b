"""The block threshold for monitor verdicts on user messages: `python -m training.user_block`.

A monitor-lane flag blocks the conversation's next turn. On untrusted content (tool
outputs, files) the flag threshold does; on what the user typed, a false alarm kills an
agent's task for a sentence such as "Please answer the question.", so the block waits for
more certainty (`deltaguard.state.policy.USER_BLOCK_THRESHOLD`, CategoryPolicy
`user_block_threshold`); between the two the flag alerts without interrupting.

This prints, for the detector as served (its heads on a user message, 0.5-scaled), the
validation split's user-channel attacks of the detection corpus that reach each candidate
threshold and the benign user texts that do: the corpus' benign prompts and the user
messages of the validation split's real agent conversations (training/lib/agent_traffic.py;
those under registry.LONG_USER_CHARS, which the detector judges as users' own words). The
rule: the lowest candidate that no benign validation text reaches.
"""

from __future__ import annotations

import sys

import numpy as np

from deltaguard.classifiers.registry import LONG_USER_CHARS, load_classifiers
from deltaguard.parsing import parse_item
from training.lib.agent_traffic import conversation_texts
from training.lib.detection_data import all_rows

CANDIDATES = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)


def detector_scores(texts: list[str]) -> np.ndarray:
    """The detector's highest category score of each text sent alone as a user message."""
    (detector,) = [c for c in load_classifiers(("lexical", "detector")) if c.name == "detector"]
    out = []
    for text in texts:
        update = detector.update(detector.initial_state(), [parse_item({"role": "user", "content": text})])
        out.append(max(update.item_scores[0].values()))
    return np.array(out)


def main() -> int:
    rows = [r for r in all_rows() if r.split == "validation" and r.channel == "user"]
    attacks = detector_scores([r.text for r in rows if r.label != "benign"])
    benign = detector_scores(
        [r.text for r in rows if r.label == "benign"]
        + sorted(
            {
                m
                for _, user, _, _ in conversation_texts("validation")
                for m in user
                if len(m) < LONG_USER_CHARS
            }
        )
    )
    print(f"{len(attacks)} user attacks, {len(benign)} benign user texts (validation)")
    print("| threshold | attacks reaching it | benign texts reaching it | precision |")
    print("|---|---|---|---|")
    chosen = None
    for t in CANDIDATES:
        tp, fp = int((attacks >= t).sum()), int((benign >= t).sum())
        print(f"| {t} | {tp / len(attacks):.1%} | {fp} | {tp / max(1, tp + fp):.4f} |")
        if chosen is None and fp == 0:
            chosen = t
    print(f"chosen: {chosen} (highest benign score {benign.max():.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

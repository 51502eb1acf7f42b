"""The detector's screen: `python -m training.detector_screen`.

Before the detector runs on an item, lexical-v3 (about 0.4 ms per 1,000 tokens, against
~70 ms for the detector) scores it; an item whose every lexical head is below the screen's
floor is cleared without the detector. Most benign tool outputs score far below any
attack, so the monitor lane's cost follows the suspicious text, not all of it.

The floor is chosen on the detector's leave-sources-out folds (training/lib/detector_folds.py),
the only data that says what the screen costs on attacks from sources never trained on:
the largest floor of GRID at which the screen clears at most LOSS_BUDGET of the held-out
attacks the fold's detector flags, pooled over the folds. Attacks from the training
sources score far above it (their lexical scores sit near 1), so validation rows could
not set it. `nested` checks the rule itself: each fold's floor chosen on the other folds.

Writes the manifest entry "detector"'s `screen` (read-modify-write of that key only), kept
only if the detector served with it passes deltaguard.classifiers.checks.
"""

from __future__ import annotations

import argparse
import json
import sys

from training.lib.detector_spec import ARTIFACT, MODELS_DIR, log
from training.lib.screen_floor import (
    GRID,
    LOSS_BUDGET,
    benign_cleared,
    choose_floor,
    evidence,
    losses,
    nested,
)

SCREEN_ARTIFACT = "lexical"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="print the floor, leave the manifest")
    args = parser.parse_args(argv)
    folds = evidence()
    floor = choose_floor(folds)
    lost, caught = losses(folds, floor)
    screen = {
        "artifact": SCREEN_ARTIFACT,
        "floor": floor,
        "rule": (
            f"the largest floor of {list(GRID)} at which lexical-v3 clears <= {LOSS_BUDGET:.1%} of the "
            "held-out attacks the detector flags on its leave-sources-out folds, pooled "
            "(python -m training.detector_screen)"
        ),
        "evidence": {
            "lost": lost,
            "caught": caught,
            "benign_user_cleared": round(benign_cleared(folds, floor, False), 4),
            "benign_tool_cleared": round(benign_cleared(folds, floor, True), 4),
            "nested": [
                {k: round(v, 4) if isinstance(v, float) else v for k, v in n.items()} for n in nested(folds)
            ],
        },
    }
    print(json.dumps(screen, indent=1))
    if not args.dry_run:
        from deltaguard.artifacts import manifest_entry
        from training.lib.conformance import publish_entry

        entry = dict(manifest_entry(ARTIFACT, MODELS_DIR))
        entry["screen"] = screen
        publish_entry(entry, ARTIFACT, (ARTIFACT,), MODELS_DIR)
        log(f"wrote the screen (floor {floor}) to the manifest entry {ARTIFACT!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

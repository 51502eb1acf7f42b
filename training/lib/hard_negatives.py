"""Benign text the previous detector over-weights: the rows a retrain needs most.

The over-defence loop: score benign text the model never trained on with the model, keep
what it scores highest, train on it, repeat. Two pools, both of the train split only:

- **real text, window by window** (`real-mined`, as tool outputs): every 128-token window
  of every train-split document of training/lib/real_text.py, not only the one window per
  piece that build_windows picks (lexical-v3's hardest). A docstring that says "the
  decision is the one taken on the input, which is all a gateway can enforce before the
  model answers" sits in the middle of a file, where no piece's chosen window reaches.
- **chat** (`chat-mined`, as user messages): every train-split chitchat message, of which
  the recipe trains on a sample (CAP_PER_CELL); the ones the direct or jailbreak head
  scores highest are the ones the sample most likely left out.

The miners are pinned releases (manifest entries of models/), so a rebuild mines the same
rows whatever the current detector is: MINER, the first round, mined the shipped recipe's
rows; a later release mines the next round (`python -m training.train_detector --mined-by`),
the windows its own training left it over-weighting. Windows that quote an attack outright (a
guardrail example, a test fixture of an LLM library) are left out: benign rows must be
benign, and this pool is read unlabelled.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from training.lib.detector_spec import MINER
from training.lib.real_text import all_documents

REAL_SOURCE = "real-mined"
CHAT_SOURCE = "chat-mined"
PER_DOCUMENT = 3  # windows kept per document, at most: no one file teaches the model alone
FLOOR = 0.2  # a window or message is mined when a head that judges it scores this or more
CONTENT_TOKENS = 126  # a serving window's content (train_detector.WINDOW_TOKENS - 2)
STRIDE = 112
QUOTED_ATTACK = re.compile(
    r"ignore\s+(all\s+|any\s+)?(the\s+|your\s+)?(previous|prior|above|earlier)\s+(instructions|prompts?|rules)"
    r"|disregard\s+(all\s+|any\s+)?(the\s+|your\s+)?(previous|prior|above)"
    r"|jailbr[eo]ak|\bDAN\b|developer\s+mode|do\s+anything\s+now|prompt\s+injection",
    re.I,
)


def _miner(name: str = MINER):
    from deltaguard.classifiers.encoder import EncoderClassifier
    from training.lib.detector_spec import MODELS_DIR

    return EncoderClassifier(MODELS_DIR, artifact=name, screen=False, threads=2).load().model


def document_windows(text: str, tokenizer) -> list[str]:
    """The serving path's windows of `text` (its normalised view), as text."""
    from training.lib.detector_rows import training_view

    view = training_view(text)
    offsets = tokenizer.encode(view, add_special_tokens=False).offsets
    if not offsets:
        return []
    starts = [*range(0, max(1, len(offsets) - CONTENT_TOKENS + 1), STRIDE)]
    if len(offsets) > CONTENT_TOKENS and starts[-1] != len(offsets) - CONTENT_TOKENS:
        starts.append(len(offsets) - CONTENT_TOKENS)
    out = []
    for s in starts:
        last = min(s + CONTENT_TOKENS, len(offsets)) - 1
        out.append(view[offsets[s][0] : offsets[last][1]])
    return out


def mine_real(model, tokenizer) -> list[dict[str, Any]]:
    docs = [d for d in all_documents() if d.split == "train"]
    texts, owners = [], []
    for i, d in enumerate(docs):
        for w in document_windows(d.text, tokenizer):
            if not QUOTED_ATTACK.search(w):
                texts.append(w)
                owners.append(i)
    p = model.score_texts(texts)
    judged = np.maximum(p[:, 1], p[:, 2])  # tool outputs: the jailbreak and indirect heads
    best: dict[int, list[tuple[float, int]]] = {}
    for k in np.flatnonzero(judged >= FLOOR):
        best.setdefault(owners[k], []).append((float(judged[k]), int(k)))
    rows = []
    for i, found in sorted(best.items()):
        d = docs[i]
        for _score, k in sorted(found, reverse=True)[:PER_DOCUMENT]:
            rows.append(
                _row(texts[k], REAL_SOURCE, d.kind, "tool", f"{REAL_SOURCE}:{d.source}:{d.name}", "real")
            )
    return rows


def mine_chat(model, corpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    chat = [
        r
        for r in corpus
        if r["source"] == "chitchat"
        and r["split"] == "train"
        and r["label"] == "benign"
        and not QUOTED_ATTACK.search(r["text"])
    ]
    p = model.score_texts([r["text"] for r in chat])
    judged = np.maximum(p[:, 0], p[:, 1])  # user messages: the direct and jailbreak heads
    return [
        _row(r["text"], CHAT_SOURCE, r["family"], "user", r["group"], "chat")
        for r, s in zip(chat, judged, strict=True)
        if s >= FLOOR
    ]


def _row(text: str, source: str, family: str, channel: str, group: str, fp_set: str) -> dict[str, Any]:
    return {
        "text": text,
        "label": "benign",
        "source": source,
        "family": family,
        "channel": channel,
        "group": group,
        "split": "train",
        "fp_set": fp_set,
    }


def mined_rows(corpus: list[dict[str, Any]], cache: Path, miner: str = MINER) -> list[dict[str, Any]]:
    """The rows `miner` mines (cached: mining scores every window of the train split, minutes)."""
    if cache.exists():
        return [json.loads(line) for line in cache.open()]
    from tokenizers import Tokenizer

    from training.lib.detector_spec import MINER_TOKENIZER_FILE, MODELS_DIR, log

    tokenizer = Tokenizer.from_file(str(MODELS_DIR / MINER_TOKENIZER_FILE))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    model = _miner(miner)
    rows = mine_real(model, tokenizer)
    chat = mine_chat(model, corpus)
    log(f"mined with {miner}: {len(rows)} windows of real text, {len(chat)} chat messages (>= {FLOOR})")
    tmp = cache.with_suffix(".tmp")
    with tmp.open("w") as f:
        for r in rows + chat:
            f.write(json.dumps(r) + "\n")
    tmp.replace(cache)
    return rows + chat

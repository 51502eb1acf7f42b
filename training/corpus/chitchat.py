"""Benign casual chat from chitchat-dataset, its non-reserved conversations only.

DATA.md reserves the conversations whose 0-based position in the file's key order is
divisible by 10; they are skipped before anything else is looked at. A message is one
turn (a sender's consecutive utterances joined by newlines); some whole conversations are
also kept as multi-turn transcripts. Every text of a conversation shares its group.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from .example import Example
from .wheels import open_wheel

PATH = "chitchat_dataset/dataset.json"
MESSAGES = 8000
MESSAGES_PER_CONVERSATION = 2
TRANSCRIPTS = 600
TRANSCRIPT_CHARS = 6000  # a few conversations run to ~100k characters: cut at a turn boundary
MIN_CHARS = 12  # "hi", "lol" and the like teach an injection model nothing
SHORT_CHARS = 30  # ... but a character n-gram model scores such texts the most erratically
SEED = 99


def eligible(keys: list[str]) -> list[str]:
    return [k for i, k in enumerate(keys) if i % 10 != 0]


def load_chitchat(
    cache: Path | str | None = None,
    messages_wanted: int = MESSAGES,
    per_conversation: int = MESSAGES_PER_CONVERSATION,
) -> list[Example]:
    data = json.loads(open_wheel("chitchat-dataset", cache).read(PATH))
    keys = eligible(list(data))
    rng = random.Random(SEED)
    order = rng.sample(keys, len(keys))
    out: list[Example] = []
    messages = 0
    for n, k in enumerate(order):
        turns = ["\n".join(u["text"] for u in turn).strip() for turn in data[k]["messages"]]
        turns = [t for t in turns if t]
        group = f"chitchat:{k}"
        if n < TRANSCRIPTS:  # the first conversations of the shuffled order: whole transcripts
            if len(turns) >= 2:
                lines = [f"{'A' if i % 2 == 0 else 'B'}: {t}" for i, t in enumerate(turns)]
                while len(lines) > 2 and sum(len(x) + 1 for x in lines) > TRANSCRIPT_CHARS:
                    lines.pop()
                text = "\n".join(lines)
                out.append(Example(text, "benign", "chitchat", "conversation", "user", group))
            continue
        long_enough = [t for t in turns if len(t) >= MIN_CHARS]
        for t in rng.sample(long_enough, min(per_conversation, len(long_enough))):
            out.append(Example(t, "benign", "chitchat", "benign", "user", group))
            messages += 1
        if messages >= messages_wanted:
            break
    return out


def load_short_messages(cache: Path | str | None = None) -> list[Example]:
    """Every distinct message under SHORT_CHARS characters ("sure.", "why?", "you are number
    2") of the allowed conversations, grouped with the first conversation that says it.

    load_chitchat leaves them out; a model over character n-grams needs them, because a
    text of a few characters has few n-grams and each one weighs a lot: "sure." scored as
    harassment when no short benign message was in training."""
    data = json.loads(open_wheel("chitchat-dataset", cache).read(PATH))
    seen: set[str] = set()
    out: list[Example] = []
    for k in eligible(list(data)):
        for turn in data[k]["messages"]:
            text = "\n".join(u["text"] for u in turn).strip()
            key = " ".join(text.lower().split())
            if text and len(text) < SHORT_CHARS and key not in seen:
                seen.add(key)
                out.append(Example(text, "benign", "chitchat-short", "benign", "user", f"chitchat:{k}"))
    return out

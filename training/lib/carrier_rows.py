"""The corpus's direct injections placed where instructions hide in the data an agent
reads: agentprobe's carriers (training/corpus/agentprobe.py: an e-mail's footer, signature,
quoted thread or HTML comment, a document's footnote, header or table cell, a web page's
alt text, meta tag or comment).

The corpus's indirect injections come from few sources, each with a shape of its own
(agentdojo's tool environments, raginject's retrieved passages, spikee's documents): a
detector trained on them learns those shapes. These rows put the injections of the direct
sources (coding_agent.EMBEDDED_SOURCES, several languages and styles) in each carrier's
slot, with benign prompts of the corpus in the same slots as their twins, so that what
separates the two is what the slot says, not where it sits, and the corpus's short look-alike
texts (runbooks, e-mails, notes that quote an attack) in them too: a benign slot that reads
like an instruction, or quotes one, is the twin the prompts are not. Each carrier also
comes clean.

A row keeps the group and split of the corpus row it places (a fold that holds a source
out loses them with it, and a test-split text never trains); a clean carrier takes the
group of the first row placed in it per split. Seeded: the same rows every build.

Not among the shipped detector's rows: `load_rows(carriers=True)` (training/lib/detector_rows.py;
`python -m training.train_detector [fold SOURCES] --carriers`) adds them. Before the
look-alike twins, they were measured on two folds and in a build judged through the pipeline
(models/README.md, detector card, "Carriers in the shipped recipe's folds" and "Carriers in
a build"): the build flagged more look-alike documents and benign e-mails. With the twins
("The look-alike twins, one build") half that rise was taken back, and real agent traffic
still held the indirect head's threshold where it was.
"""

from __future__ import annotations

import random
from typing import Any

from training.lib.coding_agent import ADDRESSEES, MAX_EMBEDDED_CHARS, one_per_group, pick_embedded

SOURCE = "carriers"
PER_SOURCE = 150  # injections placed per direct source
BENIGN = 300  # benign prompts placed, the injections' twins
LOOKALIKE = 300  # benign look-alike texts placed: twins that quote or resemble an instruction
CHANNELS = {"email": "tool", "webpage": "tool", "document": "document"}  # as an agent receives them


def pick_lookalike(
    corpus: list[dict[str, Any]], rng: random.Random, n: int, taken: set[str]
) -> list[dict[str, Any]]:
    """`n` short benign look-alike rows of the corpus (runbooks, e-mails, notes that quote an
    attack), one per group and none of a group in `taken`."""
    pool = [
        r
        for r in corpus
        if r["label"] == "benign"
        and r["fp_set"] == "lookalike"
        and r["group"] not in taken
        and len(r["text"]) <= MAX_EMBEDDED_CHARS
    ]
    return one_per_group(rng.sample(pool, min(n, len(pool))))


def carrier_rows(
    corpus: list[dict[str, Any]],
    per_source: int = PER_SOURCE,
    benign: int = BENIGN,
    lookalike: int = LOOKALIKE,
) -> list[dict[str, Any]]:
    """Rows in train_detector's row format: each picked corpus row placed in one carrier
    (in turn), and each carrier clean once per split."""
    from training.corpus.agentprobe import load_carriers

    carriers = load_carriers()
    rng = random.Random("carriers:placed")
    picked = pick_embedded(corpus, rng, per_source, benign)
    picked += pick_lookalike(
        corpus, random.Random("carriers:lookalike"), lookalike, {r["group"] for r in picked}
    )
    rows: list[dict[str, Any]] = []
    clean_seen: set[tuple[str, str]] = set()
    for i, r in enumerate(picked):
        carrier = carriers[i % len(carriers)]
        base = {
            "source": SOURCE,
            "channel": CHANNELS[carrier.channel],
            "group": r["group"],
            "split": r["split"],
        }
        if (carrier.name, r["split"]) not in clean_seen:
            clean_seen.add((carrier.name, r["split"]))
            rows.append(
                {
                    "text": carrier.fill(""),
                    "label": "benign",
                    "family": carrier.name,
                    "fp_set": "tool",
                    **base,
                }
            )
        note = " ".join(r["text"].split())
        if r["label"] == "benign":
            twin = "lookalike" if r["fp_set"] == "lookalike" else "note"
            label, family, fp_set = "benign", f"{carrier.name}_{twin}", "lookalike"
        else:
            label, family, fp_set = "injection", r["family"], None
            if rng.random() < 0.5:
                note = f"{rng.choice(ADDRESSEES)}: {note}"
        rows.append({"text": carrier.fill(note), "label": label, "family": family, "fp_set": fp_set, **base})
    return rows

"""The corpus's direct injections placed where instructions hide in the data an agent
reads: agentprobe's carriers (training/corpus/agentprobe.py: an e-mail's footer, signature,
quoted thread or HTML comment, a document's footnote, header or table cell, a web page's
alt text, meta tag or comment).

The corpus's indirect injections come from few sources, each with a shape of its own
(agentdojo's tool environments, raginject's retrieved passages, spikee's documents): a
detector trained on them learns those shapes. These rows put the injections of the direct
sources (coding_agent.EMBEDDED_SOURCES, several languages and styles) in each carrier's
slot, with benign prompts of the corpus in the same slots as their twins, so that what
separates the two is what the slot says, not where it sits. Each carrier also comes clean.

A row keeps the group and split of the corpus row it places (a fold that holds a source
out loses them with it, and a test-split text never trains); a clean carrier takes the
group of the first row placed in it per split. Seeded: the same rows every build.

Not among the shipped detector's rows: `load_rows(carriers=True)` (training/lib/detector_rows.py;
`python -m training.train_detector [fold SOURCES] --carriers`) adds them, measured on two
folds and in a build judged through the pipeline (models/README.md, detector card,
"Carriers in the shipped recipe's folds" and "Carriers in a build").
"""

from __future__ import annotations

import random
from typing import Any

from training.lib.coding_agent import ADDRESSEES, pick_embedded

SOURCE = "carriers"
PER_SOURCE = 150  # injections placed per direct source
BENIGN = 300  # benign prompts placed, the injections' twins
CHANNELS = {"email": "tool", "webpage": "tool", "document": "document"}  # as an agent receives them


def carrier_rows(
    corpus: list[dict[str, Any]], per_source: int = PER_SOURCE, benign: int = BENIGN
) -> list[dict[str, Any]]:
    """Rows in train_detector's row format: each picked corpus row placed in one carrier
    (in turn), and each carrier clean once per split."""
    from training.corpus.agentprobe import load_carriers

    carriers = load_carriers()
    rng = random.Random("carriers:placed")
    picked = pick_embedded(corpus, rng, per_source, benign)
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
            label, family, fp_set = "benign", f"{carrier.name}_note", "lookalike"
        else:
            label, family, fp_set = "injection", r["family"], None
            if rng.random() < 0.5:
                note = f"{rng.choice(ADDRESSEES)}: {note}"
        rows.append({"text": carrier.fill(note), "label": label, "family": family, "fp_set": fp_set, **base})
    return rows

"""The detector's labelled rows (training/lib/detection_data.py's, as dicts, plus its own:
binary_text, coding_agent, real_rows, hard_negatives), the targets each row trains, the
view it trains on, and the rows of a leave-sources-out fold.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from training.lib.detector_spec import (
    FOLD_SAMPLE,
    INDIRECT_CHANNELS,
    MINER,
    NORMALIZE,
    SEED,
    WORK,
)


def load_rows(carriers: bool = False, miners: Sequence[str] = (MINER,)) -> list[dict[str, Any]]:
    """detection_data's rows as dicts (cached: building them takes ~30 s), and the
    detector's own rows: tool outputs carrying binary data as text (binary_text.py), and
    injections aimed at coding agents with their benign twins (coding_agent.py), and the
    benign windows `miners` over-weight (hard_negatives.py, a later round's less what an
    earlier one mined: the shipped recipe's are MINER's); with `carriers`, also the corpus's
    direct injections placed in agentprobe's carriers (carrier_rows.py: not among the shipped
    detector's rows)."""
    from training.lib.binary_text import binary_text_rows
    from training.lib.coding_agent import coding_agent_rows, embedded_rows

    cache = WORK / "rows.jsonl"
    if not cache.exists():
        from training.lib.detection_data import all_rows

        WORK.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        with tmp.open("w") as f:
            for r in all_rows():
                f.write(json.dumps(_row_dict(r)) + "\n")
        tmp.replace(cache)
    corpus = [json.loads(line) for line in cache.open()]
    from training.lib.hard_negatives import mined_rows
    from training.lib.real_rows import real_rows

    rows = corpus + binary_text_rows() + coding_agent_rows() + embedded_rows(corpus) + real_rows(corpus)
    seen: set[str] = set()
    for miner in miners:  # a later round keeps what the earlier ones did not mine
        mined = [r for r in mined_rows(corpus, WORK / f"mined-{miner}.jsonl", miner) if r["text"] not in seen]
        seen.update(r["text"] for r in mined)
        rows += mined
    if carriers:
        from training.lib.carrier_rows import carrier_rows

        rows += carrier_rows(corpus)
    return rows


def _row_dict(r: Any) -> dict[str, Any]:
    names = ("text", "label", "source", "family", "channel", "group", "split")
    return {n: getattr(r, n) for n in names} | {"fp_set": r.fp_set}


def head_targets(row: dict[str, Any]) -> list[float]:
    """Per head: 1 / 0, or NaN where the row does not train that head."""
    label, indirect = row["label"], row["channel"] in INDIRECT_CHANNELS
    nan = float("nan")
    direct = nan if indirect or label == "jailbreak" else float(label == "injection")
    through_tools = nan if not indirect or label == "jailbreak" else float(label == "injection")
    jailbreak = nan if label == "injection" else float(label == "jailbreak")
    return [direct, jailbreak, through_tools]


def training_view(text: str) -> str:
    from deltaguard.classifiers import normalize

    return normalize.views(text, NORMALIZE).texts()[-1]


def held_out(rows: list[dict[str, Any]], sources: set[str]) -> tuple[list[dict], list[dict]]:
    """Rows of the held-out sources, and the rest minus every group they share."""
    groups = {r["group"] for r in rows if r["source"] in sources}
    held = [r for r in rows if r["source"] in sources]
    rest = [r for r in rows if r["source"] not in sources and r["group"] not in groups]
    return held, rest


def sample(rows: list[dict[str, Any]], per: int) -> list[dict[str, Any]]:
    """At most `per` rows of each (source, label), the same ones on every run."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[(r["source"], r["label"])].append(r)
    out = []
    for key in sorted(cells):
        cell = cells[key]
        out += cell if len(cell) <= per else random.Random(f"{SEED}{key}").sample(cell, per)
    return out


def fold_rows(
    sources: list[str], carriers: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A fold's training rows (every split), and the rows it scores: a sample of the
    held-out sources' and the benign test rows of the sources it trains on (`load_rows`'
    `carriers` among them, if asked)."""
    held, rest = held_out(load_rows(carriers), set(sources))
    reference = [r for r in rest if r["split"] == "test" and r["label"] == "benign"]
    return rest, sample(held, FOLD_SAMPLE) + reference

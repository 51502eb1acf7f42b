"""The notes model's training paragraphs (training/train_notes.py): each a paragraph of
untrusted content as classifiers/notes.py cuts it, labelled 1 when it carries an
instruction planted for the model.

- training/data/coding_notes/: texts fifteen separate authors wrote of what a coding agent
  reads (README.md there). An injected text's paragraphs that hold its injection (`span`)
  are positives, its other paragraphs and every paragraph of a benign text negatives:
  the benign texts were written to be hard (agent instruction files, installers,
  advisories quoting attacks, fixtures, runbooks).
- training/lib/coding_agent.py's templated carriers (train split, a sample): the paragraphs
  where an injected carrier differs from its clean one are positives, where its benign
  twin differs negatives (the same place, a note that asks for ordinary things).
- real text (training/lib/real_text.py: repository files and history, Debian documents;
  training/lib/agent_files.py: real agent instruction files; the real agent
  conversations' tool outputs, training/lib/agent_traffic.py), train split: the
  paragraphs that ask something (`notes.asks`, the ones served), negatives.
- the over-defence loop (`mined_rows`): a first model trained on the rows above scores a
  larger sample of the same pool; the benign paragraphs it scores highest (release
  procedures, CI comments, tutorials in other languages: firm steps it reads as planted
  instructions) are negatives of the second, final model.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

AUTHORS = Path(__file__).resolve().parents[1] / "data" / "coding_notes"
TEMPLATED_GROUPS = 400  # coding_agent carriers sampled
REAL_PARAGRAPHS = 12_000  # asking paragraphs of real documents sampled
TOOL_PARAGRAPHS = 4_000  # asking paragraphs of real agent tool outputs sampled
SEED = "notes"
MINING_POOL = 60_000  # asking paragraphs of real text the first model scores
MINED = 1_500  # of them, the highest-scoring kept as negatives, at most (and none under MINED_FLOOR)
MINED_FLOOR = 0.2
PER_GROUP = 5  # mined paragraphs per source or conversation, at most: no one of them teaches alone


def overlaps(a: int, b: int, lo: int, hi: int) -> bool:
    """Whether paragraph [a, b) holds the injection [lo, hi): half of the shorter of the two."""
    shared = min(b, hi) - max(a, lo)
    return shared > 0 and shared >= 0.5 * min(b - a, hi - lo)


def _paragraph_rows(text: str, span: tuple[int, int] | None, source: str, group: str) -> list[dict[str, Any]]:
    from deltaguard.classifiers.notes import paragraphs

    rows = []
    for a, b in paragraphs(text):
        label = int(span is not None and overlaps(a, b, *span))
        rows.append({"text": text[a:b], "label": label, "source": source, "group": group})
    return rows


def authored_rows(folder: Path = AUTHORS) -> list[dict[str, Any]]:
    """Every author's paragraphs; each author is a source of its own."""
    rows: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.jsonl")):
        for n, line in enumerate(path.open(encoding="utf-8"), 1):
            if not line.strip():
                continue
            r = json.loads(line)
            text, span = r["text"], r.get("span") or ""
            if r["label"] == "injected":
                lo = text.find(span)
                if not span or lo < 0:
                    raise ValueError(f"{path.name}:{n}: an injected text names its injection (span)")
                where: tuple[int, int] | None = (lo, lo + len(span))
            elif r["label"] == "benign":
                where = None
            else:
                raise ValueError(f"{path.name}:{n}: label {r['label']!r} is not injected or benign")
            rows += _paragraph_rows(text, where, f"authors-{path.stem}", f"{path.stem}:{r['id']}")
    return rows


def templated_rows(groups: int = TEMPLATED_GROUPS) -> list[dict[str, Any]]:
    """The differing paragraphs of a sample of coding_agent.py's train-split carriers."""
    from training.lib.coding_agent import coding_agent_rows
    from training.lib.detector_windows import diff_span

    by_group: dict[str, list[dict[str, Any]]] = {}
    for r in coding_agent_rows():
        if r["split"] == "train":
            by_group.setdefault(r["group"], []).append(r)
    picked = random.Random(SEED).sample(sorted(by_group), min(groups, len(by_group)))
    rows: list[dict[str, Any]] = []
    for g in picked:
        clean, attack, twin = by_group[g]
        for other, label in ((attack, 1), (twin, 0)):
            lo, hi = diff_span(other["text"], clean["text"])
            for row in _paragraph_rows(other["text"], (lo, hi), "coding-agent", g):
                if row["label"]:  # the paragraphs that hold the note
                    rows.append(row | {"label": label})
    return rows


def _real_texts(split: str = "train") -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key, text) of the split's real documents and agent files, and of its agent
    conversations' tool outputs (read and cut once per run: `_pools`)."""
    from training.lib import agent_files
    from training.lib.agent_traffic import conversation_texts
    from training.lib.real_text import all_documents

    docs = [(d.source, d.text) for d in all_documents() if d.split == split]
    docs += [(d.source, d.text) for d in agent_files.agent_documents() if d.split == split]
    conversations = conversation_texts(split)
    tools = [(f"{kind}:{i}", t) for i, (kind, _, read, _) in enumerate(conversations) for t in read]
    return docs, tools


def _asking(texts: list[tuple[str, str]], source: str) -> list[dict[str, Any]]:
    from deltaguard.classifiers.notes import asks, paragraphs

    return [
        {"text": t[a:b], "label": 0, "source": source, "group": f"{source}:{key}"}
        for key, t in texts
        for a, b in paragraphs(t)
        if asks(t[a:b])
    ]


@functools.cache
def _pools(split: str = "train") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The asking paragraphs of the split's real documents and of its tool outputs: both the
    sampled rows and the mining pool draw on the train split's, the paragraph screen's
    report on the validation and test splits' (training/train_notes_screen.py)."""
    docs, tools = _real_texts(split)
    return _asking(docs, "real-documents"), _asking(tools, "real-tool-outputs")


def real_rows(per_documents: int = REAL_PARAGRAPHS, per_tools: int = TOOL_PARAGRAPHS) -> list[dict[str, Any]]:
    """Asking paragraphs of the train split's real documents, agent files and agent tool
    outputs, negatives."""
    rng = random.Random(SEED)

    def sample(found: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
        return found if len(found) <= n else rng.sample(found, n)

    docs, tools = _pools()
    return sample(docs, per_documents) + sample(tools, per_tools)


def mined_rows(score: Callable[[list[str]], Sequence[float]], cache: Path) -> list[dict[str, Any]]:
    """The benign paragraphs a first model over-weights: of MINING_POOL asking paragraphs of
    the train split's real text (documents and tool outputs alike), the MINED it scores
    highest (at least MINED_FLOOR, PER_GROUP per source or conversation at most), negatives of source
    "real-mined". Cached in `cache` (scoring the pool takes minutes)."""
    from training.lib.hard_negatives import QUOTED_ATTACK

    if cache.exists():
        return [json.loads(line) for line in cache.read_text(encoding="utf-8").splitlines()]
    docs, tools = _pools()
    pool = docs + tools
    pool = random.Random(f"{SEED}-mining").sample(pool, min(MINING_POOL, len(pool)))
    pool = [r for r in pool if not QUOTED_ATTACK.search(r["text"])]  # benign rows must be benign
    scores = score([r["text"] for r in pool])
    kept: list[dict[str, Any]] = []
    per_group: dict[str, int] = {}
    for i in sorted(range(len(pool)), key=lambda i: -scores[i]):
        r = pool[i]
        if len(kept) == MINED or scores[i] < MINED_FLOOR:
            break
        if per_group.get(r["group"], 0) < PER_GROUP:
            per_group[r["group"]] = per_group.get(r["group"], 0) + 1
            kept.append(r | {"source": "real-mined", "score": round(float(scores[i]), 4)})
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return kept

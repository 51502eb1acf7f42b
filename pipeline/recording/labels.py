"""Review labels as transcript labels: what `deltaguard eval` and `calibrate` read.

A reviewer marks each flagged category of a recording `confirmed` or `false_positive`
(stored in the recording store's `labels` table). A recording is *reviewed* when every
category it was flagged for has a mark; only reviewed recordings are exported, each as
one line of transcript format v1 (docs/contract.md section 1) whose labels are

    {"categories": [confirmed categories], "turn": N, "review": {category: verdict}}

`turn` is the first turn that flagged a confirmed category (absent when every flag was a
false positive), so `deltaguard eval` measures how soon it is caught. A category that
was never flagged counts as absent: the reviewer judged the flags, not the whole taxonomy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from deltaguard.recording import RecordedTranscript, TranscriptStore


def flag_turns(rec: RecordedTranscript) -> dict[str, int]:
    """The first turn that flagged each category: from the recorded verdicts, or from a flag
    event (an output flag is raised after its turn's verdict)."""
    turns: dict[str, int] = {}
    for row in rec.verdicts:
        for cat in row.get("flagged_categories", []):
            turns.setdefault(cat, int(row["index"]))
    index = {rid: n for n, rid in enumerate(rec.response_ids)}
    for event in rec.flags:
        at = index.get(event.get("response_id"))
        if at is None:
            continue
        for cat in event.get("categories", []):
            turns[cat] = min(turns.get(cat, at), at)
    return turns


def is_reviewed(rec: RecordedTranscript, marks: Mapping[str, Mapping[str, Any]]) -> bool:
    """Every category the recording was flagged for has a mark."""
    return bool(rec.categories) and all(cat in marks for cat in rec.categories)


def labelled_line(rec: RecordedTranscript, marks: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The recording as a transcript line, labelled with its review marks."""
    confirmed = [c for c in rec.categories if marks.get(c, {}).get("verdict") == "confirmed"]
    labels: dict[str, Any] = {
        "categories": confirmed,
        "review": {c: marks[c]["verdict"] for c in rec.categories if c in marks},
    }
    turns = flag_turns(rec)
    caught = [turns[c] for c in confirmed if c in turns]
    if caught:
        labels["turn"] = min(caught)
    line = dict(rec.transcript)
    line["recorded"] = {**line.get("recorded", {}), "recording": rec.id}
    line["labels"] = labels
    return line


def reviewed_lines(
    store: TranscriptStore, tenant: str | Literal["*"] | None = "*"
) -> tuple[list[dict[str, Any]], int]:
    """(labelled lines of the reviewed recordings, how many recordings were left out)."""
    recordings = store.read(tenant=tenant)
    marks = store.labels([r.id for r in recordings])
    lines = [labelled_line(r, marks[r.id]) for r in recordings if is_reviewed(r, marks.get(r.id, {}))]
    return lines, len(recordings) - len(lines)


def to_jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)


def export_reviewed(store_path: Path | str, out: Path) -> tuple[int, int]:
    """Write the reviewed recordings of a store as a transcript file; (written, left out)."""
    with TranscriptStore(store_path).open(create=False) as store:
        lines, left_out = reviewed_lines(store)
    out.write_text(to_jsonl(lines), encoding="utf-8")
    return len(lines), left_out

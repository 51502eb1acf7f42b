"""Reading transcript files (JSONL, format v1: docs/contract.md section 1).

`read_transcripts` yields a `Conversation` per good line and a `TranscriptError` per bad
one, so one broken line never stops the others from being processed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltaguard.errors import ItemError, TranscriptError
from deltaguard.items import Item
from deltaguard.parsing import parse_items


@dataclass(frozen=True, slots=True)
class Turn:
    input: list[Item]
    output: list[Item]


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    turns: list[Turn]
    line: int
    labels: dict[str, Any] = field(default_factory=dict)  # the line's `labels`, as written

    @property
    def unscored_items(self) -> int:
        """Items kept as history with no text to score (an `item_reference`)."""
        return sum(not item.scored for turn in self.turns for item in (*turn.input, *turn.output))


def parse_conversation(obj: Any, path: str, line: int) -> Conversation:
    def fail(field: str, reason: str) -> TranscriptError:
        return TranscriptError(path, line, field, reason)

    if not isinstance(obj, dict):
        raise fail("line", f"expected a JSON object, got {type(obj).__name__}")
    conv_id = obj.get("id")
    if not isinstance(conv_id, str) or not conv_id:
        raise fail("id", "expected a non-empty string")
    turns_obj = obj.get("turns")
    if not isinstance(turns_obj, list):
        raise fail("turns", "expected a list of turns")
    turns = []
    for t, turn in enumerate(turns_obj):
        if not isinstance(turn, dict):
            raise fail(f"turns[{t}]", f"expected a JSON object, got {type(turn).__name__}")
        if "input" not in turn:
            raise fail(f"turns[{t}].input", "missing")
        try:
            inputs = parse_items(turn["input"], f"turns[{t}].input", from_client=True)
            outputs = parse_items(turn.get("output", []), f"turns[{t}].output")
        except ItemError as exc:
            raise fail(exc.field, exc.reason) from None
        turns.append(Turn(inputs, outputs))
    labels = obj.get("labels")
    return Conversation(conv_id, turns, line, labels if isinstance(labels, dict) else {})


def read_transcripts(path: Path) -> Iterator[Conversation | TranscriptError]:
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield TranscriptError(str(path), line_no, "line", f"invalid UTF-8 at byte {exc.start}")
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                yield TranscriptError(
                    str(path), line_no, "line", f"invalid JSON: {exc.msg} at column {exc.colno}"
                )
                continue
            except RecursionError:
                yield TranscriptError(str(path), line_no, "line", "JSON nested too deeply")
                continue
            try:
                yield parse_conversation(obj, str(path), line_no)
            except TranscriptError as exc:
                yield exc


def count_lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for raw in f if raw.strip())

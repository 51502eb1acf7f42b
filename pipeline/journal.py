"""Billing that survives the process: an append-only journal of billing events.

The billing event of a response is written here from the moment its generation starts
(a provisional event: the input DeltaGuard counted, no output yet) and again when the
response completes (the model's usage), until the billing sink has taken it. A process
killed meanwhile (kill -9, an out-of-memory kill) loses none: the next start on the same
journal re-sends every event the sink never confirmed, the newest version of each.

Events keep their stable ids (`stable_event_id("billing", response_id)`), so a consumer
that dedupes by id never counts one twice, even when the sink had taken an event whose
confirmation the kill cut off. Writes are single `os.write` calls on an append-only
descriptor: they reach the kernel at once, which is what a killed process needs (the
machine itself going down is the sink's business, or `fsync=True`'s). A torn last line
(killed in the middle of a write) is skipped at recovery. The file is rewritten to what
is still owed at every start and whenever it outgrows `compact_bytes`, so it stays small.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import ValidationError

from deltaguard.events import BillingEvent, Event

log = logging.getLogger("deltaguard.journal")
COMPACT_BYTES = 16 * 1024 * 1024


class BillingJournal:
    """`path`: the journal file (created, with its folder, when missing)."""

    def __init__(self, path: Path | str, *, fsync: bool = False, compact_bytes: int = COMPACT_BYTES) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.compact_bytes = compact_bytes
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._owed: dict[str, BillingEvent] = {}  # what the file holds that is still owed
        self._size = 0

    def recover(self) -> list[BillingEvent]:
        """The events the sink never confirmed, the newest version of each (in the order
        those were written); the journal is rewritten to hold only them, then opened."""
        outstanding: dict[str, BillingEvent] = {}
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                self._replay(line, outstanding)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._owed = dict(outstanding)
            self._rewrite()
        if outstanding:
            log.warning(
                "billing journal %s: %d events not confirmed before, re-sent", self.path, len(outstanding)
            )
        return list(outstanding.values())

    def note(self, event: BillingEvent) -> None:
        """`event` is owed (a newer version of an id replaces the older one)."""
        with self._lock:
            self._owed.pop(event.event_id, None)
            self._owed[event.event_id] = event
            self._write(_line({"bill": event.model_dump(mode="json")}))

    def done(self, events: Sequence[Event]) -> None:
        """The sink has taken `events` (other kinds than billing are ignored)."""
        ids = [e.event_id for e in events if isinstance(e, BillingEvent)]
        if not ids:
            return
        with self._lock:
            for event_id in ids:
                self._owed.pop(event_id, None)
            self._write(_line({"done": ids}))
            if self._size > self.compact_bytes:
                self._rewrite()

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _write(self, data: str) -> None:
        """(Under the lock.)"""
        if self._fd is None:
            raise RuntimeError(f"billing journal {self.path} is not open: call recover() first")
        raw = data.encode("utf-8")
        os.write(self._fd, raw)
        self._size += len(raw)
        if self.fsync:
            os.fsync(self._fd)

    def _rewrite(self) -> None:
        """(Under the lock.) The file replaced by what is still owed, then reopened."""
        text = "".join(_line({"bill": e.model_dump(mode="json")}) for e in self._owed.values())
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = len(text.encode("utf-8"))

    @staticmethod
    def _replay(line: str, outstanding: dict[str, BillingEvent]) -> None:
        try:
            record = json.loads(line)
            if "bill" in record:
                event = BillingEvent.model_validate(record["bill"])
                outstanding.pop(event.event_id, None)
                outstanding[event.event_id] = event
            for event_id in _ids(record.get("done", ())):
                outstanding.pop(event_id, None)
        except (json.JSONDecodeError, ValidationError, AttributeError, TypeError):
            log.warning("billing journal: skipping an unreadable line (%.80r)", line)


def _ids(value: Iterable[object]) -> list[str]:
    return [v for v in value if isinstance(v, str)]


def _line(record: dict[str, object]) -> str:
    return json.dumps(record, separators=(",", ":")) + "\n"

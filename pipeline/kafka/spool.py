"""A bounded, append-only, file-backed FIFO of outbound records (the publisher's spool).

When the broker is unreachable, `KafkaEventSink` appends events here instead of
waiting, and re-sends them in order once the broker is back.

Format (two files):

- `PATH`: JSON Lines, one record per line, oldest first:
  `{"topic": "deltaguard.billing", "key": "<conversation id>", "event_id": "...", "value": {...}}`
  `value` is the event's JSON, inline, so the file can be read (and repaired) by hand.
- `PATH.offset`: the byte offset of the first record not yet delivered, as ASCII
  digits, replaced atomically (write to a temporary file, then rename).

Records before the offset were delivered; they stay until the whole file is delivered
(then both files are truncated) or until space is needed (then the undelivered tail is
copied to a new file: compaction). A crash can only make records be sent again (the
offset is written after delivery, and set to 0 before a compacted file replaces the old
one), never lost. A torn last line (a crash mid-append) is cut off on open.

The bound is on the file's size in bytes: an append that does not fit even after
compaction raises `SinkFull` and writes nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from deltaguard.errors import SinkFull
from deltaguard.kafka.records import OutboundRecord, decode_key, encode_json, encode_key

log = logging.getLogger("deltaguard.kafka.spool")


def encode_line(record: OutboundRecord) -> bytes:
    # The value is already compact ASCII JSON: splice it in rather than re-encode it.
    head = encode_json({"topic": record.topic, "key": decode_key(record.key), "event_id": record.event_id})
    return head[:-1] + b',"value":' + record.value + b"}\n"


def max_line_size(record: OutboundRecord) -> int:
    """An upper bound of `len(encode_line(record))`, cheap enough to compute per event.

    JSON escaping at most sextuples a key byte (`\\u0001`); topics and event ids are
    plain ASCII; the value is spliced in as it is.
    """
    return len(record.value) + 6 * len(record.key) + len(record.topic) + len(record.event_id) + 64


def decode_line(line: bytes) -> OutboundRecord:
    obj = json.loads(line)
    return OutboundRecord(
        topic=obj["topic"],
        key=encode_key(obj["key"]),
        value=encode_json(obj["value"]),
        event_id=obj["event_id"],
    )


def offset_path(path: Path) -> Path:
    """The file beside spool `path` that holds its delivered offset."""
    return path.with_name(path.name + ".offset")


def read_offset(path: Path) -> int:
    """The delivered offset of spool `path`; 0 (everything re-sent) when there is none or
    it cannot be read."""
    try:
        text = offset_path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return 0
    try:
        return max(0, int(text))
    except ValueError:
        log.error("spool %s: unreadable offset %r; re-sending everything", path, text)
        return 0


def write_offset(path: Path, offset: int) -> None:
    """Replace spool `path`'s delivered offset atomically (a temporary file, renamed in)."""
    target = offset_path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(str(offset), encoding="ascii")
    os.replace(tmp, target)


def repair_tail(f: BinaryIO, path: Path) -> int:
    """Cut what follows the last complete, parseable line of `f` (a torn or corrupt tail);
    returns where the good data ends."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return 0
    f.seek(0)
    good = 0
    for line in f:
        if not line.endswith(b"\n"):
            break
        try:
            json.loads(line)
        except ValueError:
            break
        good += len(line)
    if good != size:
        log.error("spool %s: cutting %d bytes of a torn or corrupt tail", path, size - good)
        f.truncate(good)
    return good


def count_lines(f: BinaryIO, start: int, end: int) -> int:
    """How many records `f` holds between byte offsets `start` and `end`."""
    f.seek(start)
    return f.read(end - start).count(b"\n")


class Spool:
    """The spool file pair (see module docstring). Not thread-safe: one event loop owns it.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> spool = Spool(d / "s.jsonl", max_bytes=10_000)
    >>> spool.open()
    >>> spool.append([OutboundRecord("t", b"conv", b'{"a":1}', "e1")])
    >>> [(r.event_id, end) for r, end in spool.peek(10)]
    [('e1', 59)]
    >>> spool.commit(59); spool.pending_records
    0
    """

    def __init__(self, path: Path, max_bytes: int, fsync: bool = False) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.fsync = fsync
        self._file: BinaryIO | None = None

    # -- lifecycle --------------------------------------------------------------------

    def open(self) -> None:
        """Open (creating) the spool; cut a torn last line; load the delivered offset."""
        if self._file is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+b")  # noqa: SIM115 - held open for the spool's life
        data_end = repair_tail(self._file, self.path)
        self.size_ = data_end
        self.offset_ = min(read_offset(self.path), data_end)
        self.pending_records = count_lines(self._file, self.offset_, data_end)
        if self.pending_records:
            log.warning("spool %s holds %d undelivered records from before", self.path, self.pending_records)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _require_open(self) -> BinaryIO:
        if self._file is None:
            raise RuntimeError(f"spool {self.path} is not open; call open() first")
        return self._file

    # -- the FIFO ---------------------------------------------------------------------

    @property
    def pending_bytes(self) -> int:
        return self.size_ - self.offset_ if self._file is not None else 0

    def __bool__(self) -> bool:
        return self._file is not None and self.pending_records > 0

    def append(self, records: Sequence[OutboundRecord], reserve: int = 0) -> None:
        """Append records at the end, all or none; `SinkFull` when they do not fit.

        `reserve`: bytes that must stay free besides (events held in memory that may
        have to be spilled here later).
        """
        self._write(b"".join(encode_line(r) for r in records), len(records), at_front=False, reserve=reserve)

    def prepend(self, records: Sequence[OutboundRecord]) -> None:
        """Put records before every undelivered one (memory being spilled at an outage).

        Rewrites the file, so it is for rare events only.
        """
        self._write(b"".join(encode_line(r) for r in records), len(records), at_front=True)

    def _write(self, data: bytes, count: int, at_front: bool, reserve: int = 0) -> None:
        if not data:
            return
        f = self._require_open()
        if self.size_ + len(data) + reserve > self.max_bytes or at_front:
            if not at_front and self.pending_bytes + len(data) + reserve > self.max_bytes:
                raise SinkFull(
                    f"spool {self.path} is full: {self.pending_bytes} bytes pending and {reserve} "
                    f"reserved, {len(data)} more would pass the bound of {self.max_bytes} bytes"
                )
            self._compact(front=data if at_front else b"")
            if at_front:
                self.pending_records += count
                return
            f = self._require_open()  # compaction replaced the file
        f.seek(0, os.SEEK_END)
        f.write(data)
        f.flush()
        if self.fsync:
            os.fsync(f.fileno())
        self.size_ += len(data)
        self.pending_records += count

    def _compact(self, front: bytes = b"") -> None:
        """Drop delivered records (and optionally put `front` first): a new file, renamed in."""
        f = self._require_open()
        if self.offset_ == 0 and not front:
            return
        if len(front) + self.pending_bytes > self.max_bytes:
            raise SinkFull(
                f"spool {self.path} is full: cannot put {len(front)} bytes "
                f"before {self.pending_bytes} pending bytes"
            )
        f.seek(self.offset_)
        tail = f.read(self.size_ - self.offset_)
        tmp = self.path.with_name(self.path.name + ".compact")
        with open(tmp, "wb") as out:
            out.write(front + tail)
            out.flush()
            os.fsync(out.fileno())
        # Offset 0 first: a crash between the two steps re-sends, never skips.
        write_offset(self.path, 0)
        os.replace(tmp, self.path)
        f.close()
        self._file = open(self.path, "a+b")  # noqa: SIM115
        self.offset_ = 0
        self.size_ = len(front) + len(tail)

    def peek(self, max_records: int) -> list[tuple[OutboundRecord, int]]:
        """Up to `max_records` undelivered records, oldest first, each with its end offset."""
        f = self._require_open()
        f.seek(self.offset_)
        out = []
        pos = self.offset_
        while len(out) < max_records and pos < self.size_:
            line = f.readline()
            if not line:
                break
            pos += len(line)
            out.append((decode_line(line), pos))
        return out

    def commit(self, end_offset: int) -> None:
        """Mark every record before `end_offset` (from `peek`) delivered."""
        f = self._require_open()
        if not self.offset_ <= end_offset <= self.size_:
            raise ValueError(f"offset {end_offset} outside the spool's pending range")
        delivered = count_lines(f, self.offset_, end_offset)
        self.pending_records -= delivered
        if end_offset == self.size_:
            # Everything delivered: start over with an empty file.
            write_offset(self.path, 0)
            f.truncate(0)
            self.offset_ = self.size_ = 0
            self.pending_records = 0
        else:
            write_offset(self.path, end_offset)
            self.offset_ = end_offset

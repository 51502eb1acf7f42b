"""The publisher's spool: a bounded, append-only, crash-tolerant FIFO file."""

from __future__ import annotations

from pathlib import Path

import pytest

from deltaguard.errors import SinkFull
from deltaguard.kafka.records import OutboundRecord, encode_key
from deltaguard.kafka.spool import (
    Spool,
    decode_line,
    encode_line,
    max_line_size,
    offset_path,
    read_offset,
    write_offset,
)


def rec(i: int, key: str = "conv") -> OutboundRecord:
    return OutboundRecord(
        "deltaguard.billing", encode_key(key), b'{"event_id":"e%d","n":%d}' % (i, i), f"e{i}"
    )


def opened(path: Path, max_bytes: int = 100_000) -> Spool:
    spool = Spool(path, max_bytes)
    spool.open()
    return spool


def test_line_round_trip_and_size_bound():
    for record in (rec(1), rec(2, key='ünïcode \x01 "quoted" 😀'), rec(3, key="\ud800")):
        line = encode_line(record)
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert decode_line(line) == record
        assert len(line) <= max_line_size(record)


def test_fifo_order_peek_commit(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl")
    spool.append([rec(i) for i in range(5)])
    spool.append([rec(5)])
    got = spool.peek(3)
    assert [r.event_id for r, _ in got] == ["e0", "e1", "e2"]
    spool.commit(got[-1][1])
    assert spool.pending_records == 3
    assert [r.event_id for r, _ in spool.peek(10)] == ["e3", "e4", "e5"]
    spool.commit(spool.peek(10)[-1][1])
    assert not spool and spool.size_ == 0  # fully delivered: truncated


def test_reopen_resumes_after_committed_offset(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl")
    spool.append([rec(i) for i in range(4)])
    spool.commit(spool.peek(2)[-1][1])
    spool.close()
    again = opened(tmp_path / "s.jsonl")
    assert again.pending_records == 2
    assert [r.event_id for r, _ in again.peek(10)] == ["e2", "e3"]


def test_offset_file_round_trip_and_unreadable_offset_resends_everything(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    assert read_offset(path) == 0  # no offset file yet
    write_offset(path, 118)
    assert offset_path(path).read_text() == "118" and read_offset(path) == 118
    spool = opened(path)
    spool.append([rec(i) for i in range(3)])
    spool.commit(spool.peek(1)[-1][1])
    spool.close()
    offset_path(path).write_text("not a number")
    again = opened(path)
    assert [r.event_id for r, _ in again.peek(10)] == ["e0", "e1", "e2"]


def test_torn_tail_is_cut(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    spool = opened(path)
    spool.append([rec(0), rec(1)])
    spool.close()
    with path.open("ab") as f:
        f.write(b'{"topic":"deltaguard.billing","key":"c')  # a crash mid-append
    again = opened(path)
    assert [r.event_id for r, _ in again.peek(10)] == ["e0", "e1"]
    again.append([rec(2)])
    assert [r.event_id for r, _ in again.peek(10)] == ["e0", "e1", "e2"]


def test_full_spool_raises_and_writes_nothing(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl", max_bytes=1024)
    n = 0
    with pytest.raises(SinkFull, match="full"):
        while True:
            spool.append([rec(n)])
            n += 1
    size = spool.size_
    with pytest.raises(SinkFull):
        spool.append([rec(999)])
    assert spool.size_ == size and spool.pending_records == n
    assert spool.size_ <= 1024


def test_reserve_keeps_room(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl", max_bytes=1024)
    with pytest.raises(SinkFull, match="reserved"):
        spool.append([rec(0)], reserve=1024)


def test_compaction_makes_room_from_delivered_records(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl", max_bytes=1024)
    n = 0
    with pytest.raises(SinkFull):
        while True:
            spool.append([rec(n)])
            n += 1
    spool.commit(spool.peek(n - 2)[-1][1])  # all but the last two delivered
    spool.append([rec(100), rec(101)])  # fits after compaction
    assert [r.event_id for r, _ in spool.peek(10)] == [f"e{n - 2}", f"e{n - 1}", "e100", "e101"]
    assert spool.offset_ == 0


def test_prepend_puts_records_first(tmp_path: Path):
    spool = opened(tmp_path / "s.jsonl")
    spool.append([rec(2), rec(3)])
    spool.commit(spool.peek(1)[-1][1])
    spool.prepend([rec(0), rec(1)])
    assert [r.event_id for r, _ in spool.peek(10)] == ["e0", "e1", "e3"]
    spool.close()
    assert [r.event_id for r, _ in opened(tmp_path / "s.jsonl").peek(10)] == ["e0", "e1", "e3"]


def test_unopened_spool_refuses(tmp_path: Path):
    with pytest.raises(RuntimeError, match="open"):
        Spool(tmp_path / "s.jsonl", 1024).append([rec(0)])

"""The recording store: retention, tenants, transcripts readable as transcript files."""

from __future__ import annotations

import json
import sqlite3

import pytest

from deltaguard.errors import RecordingStoreError
from deltaguard.recording.recorder import TranscriptRecorder
from deltaguard.recording.store import TranscriptStore, read_recorded
from deltaguard.state.tracker import ConversationTracker
from deltaguard.transcripts import parse_conversation
from tests.pipeline.recording.conftest import AWS_KEY, EMAIL, flag, user


def test_retention_by_count_and_by_age(tmp_path, rules_scorer):
    now = [1000.0]
    recorder = TranscriptRecorder(
        tmp_path / "r.db", rules_scorer, max_conversations=3, max_age_s=60.0, clock=lambda: now[0]
    )
    tracker = ConversationTracker(rules_scorer)
    for i in range(5):
        rec = tracker.score_turn(f"c{i}", [user(f"mail {EMAIL}")]).record
        recorder.record(flag(rec, ["pii"], "flag"), rec)
        now[0] += 10
    assert [r.conversation_id for r in recorder.read()] == ["c2", "c3", "c4"]  # the 3 most recent
    # A flag keeps its recording alive; the others age out at the next write.
    now[0] += 45  # c2 was flagged at 1020, c3 at 1030, c4 at 1040; now 1095
    rec = tracker.score_turn("c4b", [user("more")], "c4").record
    recorder.record(flag(rec, ["pii"], "flag"), rec)
    assert [r.conversation_id for r in recorder.read()] == ["c4"]
    with sqlite3.connect(tmp_path / "r.db") as db:  # flags went with their recordings
        assert db.execute("select count(*) from flags").fetchone()[0] == 2
    recorder.close()


def test_tenant_is_kept_and_separates_recordings(tmp_path, rules_scorer):
    tracker = ConversationTracker(rules_scorer)
    recorder = TranscriptRecorder(tmp_path / "r.db", rules_scorer)
    rec = tracker.score_turn("t1", [user(f"mail {EMAIL}")]).record
    recorder.record(flag(rec, ["pii"], "flag"), rec)  # no tenant
    recorder.record(flag(rec, ["pii"], "flag"), rec, tenant="acme")
    recorder.close()
    assert [r.tenant for r in read_recorded(tmp_path / "r.db")] == [None, "acme"]
    assert [r.tenant for r in read_recorded(tmp_path / "r.db", tenant="acme")] == ["acme"]


def test_stored_transcripts_replay_as_transcript_files(tmp_path, rules_scorer):
    tracker = ConversationTracker(rules_scorer)
    recorder = TranscriptRecorder(tmp_path / "r.db", rules_scorer, redact=False)
    rec = tracker.score_turn("x1", [user(f"key {AWS_KEY}")]).record
    recorder.record(flag(rec, ["secrets"]), rec)
    recorder.close()
    with sqlite3.connect(tmp_path / "r.db") as db:
        (line,) = db.execute("select transcript from transcripts").fetchone()
    conv = parse_conversation(json.loads(line), "export.jsonl", 1)
    assert conv.id == "x1" and conv.turns[0].input[0].text == f"key {AWS_KEY}"


def test_flags_past_the_cap_are_counted_not_stored(tmp_path, rules_scorer):
    tracker = ConversationTracker(rules_scorer)
    rec = tracker.score_turn("f1", [user(f"mail {EMAIL}")]).record
    with TranscriptStore(tmp_path / "r.db", max_flags_per_transcript=2).open() as store:
        recorder = TranscriptRecorder(tmp_path / "r.db", rules_scorer)
        recorder.record(flag(rec, ["pii"], "flag"), rec)
        (rid,) = [r.id for r in store.read()]
        for n in range(3):
            event = flag(rec, ["pii"], "flag").model_copy(update={"event_id": f"extra-{n}"})
            store.add_flag(rid, event, ["pii"], "flag")
        (got,) = store.read()
        assert len(got.flags) == 2 and got.flags_dropped == 2
        recorder.close()


def test_a_refused_label_leaves_no_transaction_open(tmp_path, rules_scorer):
    tracker = ConversationTracker(rules_scorer)
    recorder = TranscriptRecorder(tmp_path / "r.db", rules_scorer)
    rec = tracker.score_turn("l1", [user(f"mail {EMAIL}")]).record
    recorder.record(flag(rec, ["pii"], "flag"), rec)
    recorder.close()
    with TranscriptStore(tmp_path / "r.db").open(create=False) as store:
        (rid,) = [r.id for r in store.read()]
        with pytest.raises(RecordingStoreError, match="no recording 999"):
            store.set_label(999, "pii", "confirmed", None)
        assert not store.db.in_transaction  # rolled back
        store.set_label(rid, "pii", "false_positive", "acme")
        assert store.labels()[rid]["pii"]["verdict"] == "false_positive"
        store.set_label(rid, "pii", None, None)
        assert store.labels() == {}
        with pytest.raises(RecordingStoreError, match="label verdict"):
            store.set_label(rid, "pii", "maybe", None)

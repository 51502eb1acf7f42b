"""The recording store's schema: a new file gets every table, a foreign or newer one is refused."""

from __future__ import annotations

import sqlite3

import pytest

from deltaguard.errors import RecordingStoreError
from deltaguard.recording.schema import SCHEMA_VERSION, connect


def tables(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("select name from sqlite_master where type = 'table'")}


def test_a_new_store_gets_every_table_and_the_current_version(tmp_path):
    db = connect(tmp_path / "r.db", busy_timeout_s=1.0)
    assert tables(db) == {"meta", "transcripts", "flags", "labels"}
    (version,) = db.execute("select value from meta where key = 'schema_version'").fetchone()
    assert int(version) == SCHEMA_VERSION
    assert db.execute("pragma journal_mode").fetchone() == ("wal",)
    assert db.execute("pragma foreign_keys").fetchone() == (1,)
    db.close()


def test_a_file_that_is_not_a_store_is_refused(tmp_path):
    path = tmp_path / "r.db"
    path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(RecordingStoreError, match="not a usable recording store"):
        connect(path, busy_timeout_s=1.0)


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "r.db"
    connect(path, busy_timeout_s=1.0).close()
    with sqlite3.connect(path) as db:
        db.execute("update meta set value = ? where key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(RecordingStoreError, match=f"schema version {SCHEMA_VERSION + 1}"):
        connect(path, busy_timeout_s=1.0)

"""The recording store's SQLite schema, and the connection that opens (and migrates) it.

Schema versions only add tables, so an older store is brought up to date on open by the
`CREATE TABLE IF NOT EXISTS` statements themselves; a newer one is refused.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from deltaguard.errors import RecordingStoreError

SCHEMA_VERSION = 2  # 2: the review labels table (a version 1 store gains it on open)
REVIEW_VERDICTS = ("confirmed", "false_positive")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transcripts (
    id INTEGER PRIMARY KEY,
    tenant TEXT,                      -- NULL: no tenant
    conversation_id TEXT NOT NULL,
    response_id TEXT NOT NULL,        -- the last turn recorded: the flagged one
    response_ids TEXT NOT NULL,       -- JSON list, one response id per turn
    decision TEXT NOT NULL,           -- the harshest flag decision seen: flag or block
    categories TEXT NOT NULL,         -- JSON list: every category flagged so far
    redacted INTEGER NOT NULL,
    redactions TEXT NOT NULL,         -- JSON {"kinds": {kind: n}, "categories", "turns", "kind_categories"}
    classifier_versions TEXT NOT NULL,
    policy TEXT NOT NULL,             -- JSON Policy in force when recorded
    transcript TEXT NOT NULL,         -- one line of transcript format v1
    verdicts TEXT NOT NULL,           -- JSON list of per-turn verdicts (replay --json shape, and
                                      -- item_scores: each item's scores before redaction)
    flags_dropped INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL          -- last flag: retention by age and count uses it
);
CREATE INDEX IF NOT EXISTS transcripts_by_conversation ON transcripts (conversation_id, tenant);
CREATE INDEX IF NOT EXISTS transcripts_by_update ON transcripts (updated_at);
CREATE TABLE IF NOT EXISTS flags (
    transcript INTEGER NOT NULL REFERENCES transcripts (id) ON DELETE CASCADE,
    event_id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    lane TEXT NOT NULL,
    decision TEXT NOT NULL,
    created_at REAL NOT NULL,
    event TEXT NOT NULL,              -- the FlagEvent as JSON
    PRIMARY KEY (transcript, event_id)
);
CREATE TABLE IF NOT EXISTS labels (   -- schema 2: a reviewer's verdict on one flagged category
    transcript INTEGER NOT NULL REFERENCES transcripts (id) ON DELETE CASCADE,
    category TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('confirmed', 'false_positive')),
    reviewer TEXT,                    -- the tenant whose key marked it
    updated_at REAL NOT NULL,
    PRIMARY KEY (transcript, category)
);
"""


def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection to the recording store at `path` (created when missing): WAL journal,
    foreign keys and secure delete on, the schema brought up to `SCHEMA_VERSION`.
    `RecordingStoreError` when the file is not a store this version can use."""
    try:
        db = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA secure_delete=ON")
        db.executescript(SCHEMA)
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) > SCHEMA_VERSION:
            raise RecordingStoreError(
                f"{path} has schema version {row[0]}; this DeltaGuard reads up to {SCHEMA_VERSION}"
            )
        elif int(row[0]) < SCHEMA_VERSION:
            # Migrations only add tables (created above), so older stores stay readable as is.
            db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    except sqlite3.DatabaseError as exc:
        raise RecordingStoreError(f"{path} is not a usable recording store: {exc}") from exc
    return db

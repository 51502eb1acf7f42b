"""The SQLite file flagged conversations are recorded in, and the review labels on them.

Why SQLite rather than a JSONL file: retention by count and by age is a `DELETE` (a
JSONL file would have to be rewritten), replay looks recordings up by conversation
through an index, several gateway processes can write one file safely (WAL journal,
busy timeout, one transaction per recording), and everything lives in one file.
`secure_delete` is on, so content removed by retention is overwritten, not left in
free pages. `sqlite3 FILE "select transcript from transcripts"` prints a JSONL
transcript file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from deltaguard.errors import RecordingStoreError
from deltaguard.events import FlagEvent
from deltaguard.recording.schema import REVIEW_VERDICTS, connect
from deltaguard.transcripts import Conversation, parse_conversation


@dataclass(frozen=True, slots=True)
class RecordedTranscript:
    """One recording, as read back from the store."""

    id: int
    tenant: str | None
    conversation_id: str
    response_id: str
    response_ids: list[str]
    decision: str
    categories: list[str]
    redacted: bool
    redactions: dict[str, Any]
    classifier_versions: dict[str, str]
    policy: dict[str, Any]
    transcript: dict[str, Any]
    verdicts: list[dict[str, Any]]
    flags: list[dict[str, Any]]
    flags_dropped: int
    created_at: float
    updated_at: float

    def conversation(self, source: str = "<store>") -> Conversation:
        """The transcript, parsed as `deltaguard replay` parses a file line."""
        return parse_conversation(self.transcript, source, self.id)


@dataclass(frozen=True, slots=True)
class RelatedRecording:
    """A recording of one conversation as the recorder matches a new flag against it."""

    id: int
    response_ids: list[str]
    categories: list[str]
    decision: str


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class TranscriptStore:
    """The SQLite file recordings live in (see the module docstring for why SQLite).

    Retention is enforced on every write: recordings whose last flag is older than
    `max_age_s` go, then the least recently flagged beyond `max_conversations`.
    A connection belongs to the thread that opened it.

    >>> import tempfile, os
    >>> with TranscriptStore(Path(tempfile.mkdtemp()) / "r.db").open() as store:
    ...     store.count()
    0
    """

    def __init__(
        self,
        path: Path | str,
        *,
        max_conversations: int = 10_000,
        max_age_s: float | None = 30 * 24 * 3600.0,
        max_flags_per_transcript: int = 256,
        busy_timeout_s: float = 10.0,
        clock: Any = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_conversations = max_conversations
        self.max_age_s = max_age_s
        self.max_flags_per_transcript = max_flags_per_transcript
        self.busy_timeout_s = busy_timeout_s
        self.clock = clock
        self._db: sqlite3.Connection | None = None

    # -- lifecycle

    def open(self, create: bool = True) -> TranscriptStore:
        if self.max_conversations < 1:
            raise ValueError("max_conversations must be at least 1")
        if not create and not self.path.is_file():
            raise RecordingStoreError(f"no recording store at {self.path}")
        self._db = connect(self.path, self.busy_timeout_s)
        return self

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> TranscriptStore:
        return self if self._db is not None else self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RecordingStoreError("TranscriptStore is not open: call open() first")
        return self._db

    @contextlib.contextmanager
    def _write(self, retain: bool = True) -> Iterator[sqlite3.Connection]:
        """One write transaction, rolled back on any error; retention is enforced in it
        unless `retain` is false."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            if retain:
                apply_retention(db, self.clock(), self.max_age_s, self.max_conversations)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # -- writing

    def related(self, tenant: str | None, conversation_id: str) -> list[RelatedRecording]:
        rows = self.db.execute(
            "SELECT id, response_ids, categories, decision FROM transcripts "
            "WHERE conversation_id = ? AND tenant IS ? ORDER BY id",
            (conversation_id, tenant),
        ).fetchall()
        return [RelatedRecording(r[0], json.loads(r[1]), json.loads(r[2]), r[3]) for r in rows]

    def add_flag(self, transcript: int, event: FlagEvent, categories: list[str], decision: str) -> None:
        """Add a flag event to a recording (and widen its categories and decision)."""
        with self._write() as db:
            db.execute(
                "UPDATE transcripts SET categories = ?, decision = ?, updated_at = ? WHERE id = ?",
                (_dumps(categories), decision, self.clock(), transcript),
            )
            insert_flag(db, transcript, event, self.max_flags_per_transcript)

    def save(self, entry: dict[str, Any], event: FlagEvent, replace: int | None = None) -> int:
        """Insert a recording (or replace recording `replace`), with its flag event."""
        now = self.clock()
        cols = (
            "tenant",
            "conversation_id",
            "response_id",
            "response_ids",
            "decision",
            "categories",
            "redacted",
            "redactions",
            "classifier_versions",
            "policy",
            "transcript",
            "verdicts",
        )
        values = [
            entry["tenant"],
            entry["conversation_id"],
            entry["response_id"],
            _dumps(entry["response_ids"]),
            entry["decision"],
            _dumps(entry["categories"]),
            int(entry["redacted"]),
            _dumps(entry["redactions"]),
            _dumps(entry["classifier_versions"]),
            _dumps(entry["policy"]),
            _dumps(entry["transcript"]),
            _dumps(entry["verdicts"]),
        ]
        with self._write() as db:
            current = None
            if replace is not None:
                current = db.execute("SELECT id FROM transcripts WHERE id = ?", (replace,)).fetchone()
            if current is not None:
                sets = ", ".join(f"{c} = ?" for c in cols)
                db.execute(
                    f"UPDATE transcripts SET {sets}, updated_at = ? WHERE id = ?", (*values, now, replace)
                )
                row_id = int(replace)  # type: ignore[arg-type]
            else:
                names = ", ".join((*cols, "created_at", "updated_at"))
                marks = ", ".join("?" for _ in range(len(cols) + 2))
                cur = db.execute(f"INSERT INTO transcripts ({names}) VALUES ({marks})", (*values, now, now))
                row_id = int(cur.lastrowid or 0)
            insert_flag(db, row_id, event, self.max_flags_per_transcript)
        return row_id

    # -- review labels

    def set_label(self, transcript: int, category: str, verdict: str | None, reviewer: str | None) -> None:
        """Mark recording `transcript`'s flag for `category` confirmed or false positive
        (`verdict` None: clear the mark). Labels never trigger retention: a reviewer's
        store may have other limits than the gateway that writes it."""
        if verdict is not None and verdict not in REVIEW_VERDICTS:
            raise RecordingStoreError(f"label verdict must be one of {REVIEW_VERDICTS}, got {verdict!r}")
        with self._write(retain=False) as db:
            if db.execute("SELECT 1 FROM transcripts WHERE id = ?", (transcript,)).fetchone() is None:
                raise RecordingStoreError(f"no recording {transcript} in {self.path}")
            if verdict is None:
                db.execute("DELETE FROM labels WHERE transcript = ? AND category = ?", (transcript, category))
            else:
                db.execute(
                    "INSERT INTO labels VALUES (?, ?, ?, ?, ?) ON CONFLICT (transcript, category) "
                    "DO UPDATE SET verdict = excluded.verdict, reviewer = excluded.reviewer, "
                    "updated_at = excluded.updated_at",
                    (transcript, category, verdict, reviewer, self.clock()),
                )

    def labels(self, transcripts: Sequence[int] | None = None) -> dict[int, dict[str, dict[str, Any]]]:
        """{recording id: {category: {"verdict", "reviewer", "updated_at"}}}."""
        sql = "SELECT transcript, category, verdict, reviewer, updated_at FROM labels"
        args: list[int] = []
        if transcripts is not None:
            args = [int(t) for t in transcripts]
            sql += f" WHERE transcript IN ({', '.join('?' for _ in args)})" if args else " WHERE 0"
        out: dict[int, dict[str, dict[str, Any]]] = {}
        for t, cat, verdict, reviewer, at in self.db.execute(sql, args):
            out.setdefault(t, {})[cat] = {"verdict": verdict, "reviewer": reviewer, "updated_at": at}
        return out

    # -- reading

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM transcripts").fetchone()[0])

    def summaries(self) -> list[dict[str, Any]]:
        """Every recording's metadata (no transcript, verdicts or flags), newest flag first."""
        cur = self.db.execute(
            "SELECT id, tenant, conversation_id, decision, categories, redacted, response_ids, "
            "created_at, updated_at FROM transcripts ORDER BY updated_at DESC, id DESC"
        )
        out = []
        for r in rows_of(cur):
            r["categories"] = json.loads(r["categories"])
            r["turns"] = len(json.loads(r.pop("response_ids")))
            r["redacted"] = bool(r["redacted"])
            out.append(r)
        return out

    def read(
        self,
        conversation_id: str | None = None,
        tenant: str | Literal["*"] | None = "*",
        ids: Sequence[int] | None = None,
    ) -> list[RecordedTranscript]:
        """Recordings in the order they were first made; `tenant="*"`: every tenant;
        `ids`: only these recordings."""
        where: list[str] = []
        args: list[Any] = []
        if conversation_id is not None:
            where.append("conversation_id = ?")
            args.append(conversation_id)
        if ids is not None:
            where.append(f"id IN ({', '.join('?' for _ in ids)})" if ids else "0")
            args += [int(i) for i in ids]
        if tenant != "*":
            where.append("tenant IS ?")
            args.append(tenant)
        sql = (
            "SELECT * FROM transcripts" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        )
        out = []
        for r in rows_of(self.db.execute(sql, args)):
            flags = [
                json.loads(e)
                for (e,) in self.db.execute(
                    "SELECT event FROM flags WHERE transcript = ? ORDER BY created_at, event_id", (r["id"],)
                )
            ]
            out.append(recorded_transcript(r, flags))
        return out


def rows_of(cur: sqlite3.Cursor) -> list[dict[str, Any]]:
    """A query's rows, each as {column name: value}."""
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def recorded_transcript(row: dict[str, Any], flags: list[dict[str, Any]]) -> RecordedTranscript:
    """A `transcripts` row (column name -> value) and its flag events, read back."""
    return RecordedTranscript(
        id=row["id"],
        tenant=row["tenant"],
        conversation_id=row["conversation_id"],
        response_id=row["response_id"],
        response_ids=json.loads(row["response_ids"]),
        decision=row["decision"],
        categories=json.loads(row["categories"]),
        redacted=bool(row["redacted"]),
        redactions=json.loads(row["redactions"]),
        classifier_versions=json.loads(row["classifier_versions"]),
        policy=json.loads(row["policy"]),
        transcript=json.loads(row["transcript"]),
        verdicts=json.loads(row["verdicts"]),
        flags=flags,
        flags_dropped=row["flags_dropped"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def apply_retention(
    db: sqlite3.Connection, now: float, max_age_s: float | None, max_conversations: int
) -> None:
    """Delete the recordings whose last flag is older than `max_age_s`, then the least
    recently flagged beyond `max_conversations` (their flags and labels go with them)."""
    if max_age_s is not None:
        db.execute("DELETE FROM transcripts WHERE updated_at < ?", (now - max_age_s,))
    db.execute(
        "DELETE FROM transcripts WHERE id NOT IN "
        "(SELECT id FROM transcripts ORDER BY updated_at DESC, id DESC LIMIT ?)",
        (max_conversations,),
    )


def insert_flag(db: sqlite3.Connection, transcript: int, event: FlagEvent, max_flags: int) -> None:
    """Add `event` to recording `transcript`; past `max_flags` events it is only counted
    (`flags_dropped`)."""
    (count,) = db.execute("SELECT count(*) FROM flags WHERE transcript = ?", (transcript,)).fetchone()
    if count >= max_flags:
        db.execute("UPDATE transcripts SET flags_dropped = flags_dropped + 1 WHERE id = ?", (transcript,))
        return
    db.execute(
        "INSERT OR IGNORE INTO flags VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            transcript,
            event.event_id,
            event.response_id,
            event.lane,
            event.decision,
            event.created_at,
            _dumps(event.model_dump(mode="json")),
        ),
    )


def read_recorded(
    path: Path | str, conversation_id: str | None = None, tenant: str | Literal["*"] | None = "*"
) -> list[RecordedTranscript]:
    """The recordings of the store at `path` (which must exist)."""
    with TranscriptStore(path).open(create=False) as store:
        return store.read(conversation_id, tenant)

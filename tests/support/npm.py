"""Pinned npm packages installed on first use into the repository's git-ignored `.cache/`.

    npm_install("@openai/codex", "0.171.0", CACHE / "0.171.0", marker, CodexUnavailable)

A fresh CI machine has node and npm but none of the tools the end-to-end tests drive;
each is installed once, under a file lock (parallel test workers share the cache), and a
failure names the package and npm's own error.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path


def npm_install(
    package: str, version: str, prefix: Path, marker: Path, error: type[Exception], timeout_s: float = 300.0
) -> None:
    """Install `package@version` into `prefix` unless `marker` (a file it ships) exists."""
    if marker.exists():
        return
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise error(f"node and npm are needed to install {package}")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return
        command = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error"]
        done = subprocess.run(
            [*command, f"{package}@{version}"], capture_output=True, text=True, timeout=timeout_s
        )
        if done.returncode != 0 or not marker.exists():
            raise error(f"npm install {package}@{version} failed:\n{done.stderr[-4000:]}")

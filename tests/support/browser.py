"""Headless Chromium driven by playwright-core, for tests of the pages the app serves.

    chromium = chromium_binary()        # Debian's chromium, installed with apt-get if missing
    node_modules = playwright_core()    # the pinned playwright-core, installed with npm on first use
    result = run_node_script(script, {"url": url, "out": str(tmp_path)})

Playwright's own browser download does not work on a closed network, so the browser is
Debian's `chromium` package (installed with `apt-get install -y chromium` when
/usr/bin/chromium is missing; the tests run as root) and the driver is `playwright-core`
(no browser bundled), pinned and installed with npm into `.cache/playwright-core/<version>/`
at the repository root (git-ignored), as tests/support/codex.py does for the Codex CLI.
A script gets its arguments as JSON in argv[2] and prints one JSON object on its last
line of stdout.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from tests.support.npm import npm_install

PLAYWRIGHT_VERSION = "1.65.1"
PLAYWRIGHT_PACKAGE = "playwright-core"
CHROMIUM = Path("/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / PLAYWRIGHT_PACKAGE
# As root on a closed network: no sandbox, no GPU, and no background connections (each
# would be refused, many at a time, and slow every start).
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class BrowserUnavailable(RuntimeError):
    """Chromium or playwright-core could not be installed."""


def _run(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)


def chromium_binary(timeout_s: float = 900.0) -> Path:
    """/usr/bin/chromium, installed from Debian's packages when it is missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        raise BrowserUnavailable(f"{CHROMIUM} is missing and apt-get is not available to install chromium")
    if os.geteuid() != 0:
        raise BrowserUnavailable(f"{CHROMIUM} is missing; installing chromium with apt-get needs root")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if CHROMIUM.exists():
            return CHROMIUM
        done = _run([apt, "install", "-y", "--no-install-recommends", "chromium"], timeout_s)
        if done.returncode != 0:
            # A fresh machine may have no package lists yet.
            update = _run([apt, "update"], timeout_s)
            done = _run([apt, "install", "-y", "--no-install-recommends", "chromium"], timeout_s)
            if done.returncode != 0:
                raise BrowserUnavailable(
                    f"apt-get install -y chromium failed:\n{update.stderr[-2000:]}\n{done.stderr[-4000:]}"
                )
    if not CHROMIUM.exists():
        raise BrowserUnavailable(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


def playwright_core(version: str = PLAYWRIGHT_VERSION, timeout_s: float = 300.0) -> Path:
    """The `node_modules` folder holding the pinned playwright-core (installed on first use)."""
    prefix = CACHE_DIR / version
    modules = prefix / "node_modules"
    if (modules / PLAYWRIGHT_PACKAGE / "package.json").exists():
        return modules
    marker = modules / PLAYWRIGHT_PACKAGE / "package.json"
    npm_install(PLAYWRIGHT_PACKAGE, version, prefix, marker, BrowserUnavailable, timeout_s)
    return modules


def run_node_script(script: Path, args: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """Run a playwright-core script with Chromium; returns the JSON of its last stdout line.

    The script finds playwright-core through NODE_PATH and the browser and its flags in
    `args["chromium"]` and `args["chromium_args"]`."""
    full = {"chromium": str(chromium_binary()), "chromium_args": list(CHROMIUM_ARGS), **args}
    env = {**os.environ, "NODE_PATH": str(playwright_core())}
    node = shutil.which("node")
    if node is None:
        raise BrowserUnavailable("node is needed to drive the browser")
    done = subprocess.run(
        [node, str(script), json.dumps(full)], capture_output=True, text=True, timeout=timeout_s, env=env
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise AssertionError(
            f"{script.name} exited {done.returncode}\n--- stdout\n{done.stdout[-6000:]}\n"
            f"--- stderr\n{done.stderr[-6000:]}"
        )
    return json.loads(lines[-1])

"""The real Portkey AI gateway (npm `@portkey-ai/gateway`) on 127.0.0.1, for end-to-end tests.

    with running_portkey() as base_url:        # installed from the registry on first use
        OpenAI(base_url=base_url + "/v1", default_headers={"x-portkey-config": json.dumps(cfg)})

Pinned (`PORTKEY_VERSION`) and installed with npm into `.cache/portkey/<version>/` at the
repository root (git-ignored). Its server binds every interface and has no host option,
so it is started with a preload (`loopback.cjs`) that pins every listening socket to
127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from deltaguard.gateway.server import free_port
from tests.support.npm import npm_install
from tests.support.state_servers import stop_process

PORTKEY_VERSION = "1.15.2"
PORTKEY_PACKAGE = "@portkey-ai/gateway"
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "portkey"
LOOPBACK = """\
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number") {
    args.splice(1, typeof args[1] === "string" ? 1 : 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && !args[0].path) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  return listen.apply(this, args);
};
"""


class PortkeyUnavailable(RuntimeError):
    """node or npm is missing, or the pinned gateway could not be installed."""


def portkey_server(version: str = PORTKEY_VERSION, timeout_s: float = 300.0) -> Path:
    """The pinned gateway's server script, installed from the npm registry on first use."""
    prefix = CACHE_DIR / version
    script = prefix / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if script.exists():
        return script
    npm_install(PORTKEY_PACKAGE, version, prefix, script, PortkeyUnavailable, timeout_s)
    return script


@contextlib.contextmanager
def running_portkey() -> Iterator[str]:
    """The gateway on a free 127.0.0.1 port; yields its base URL (without /v1)."""
    script = portkey_server()
    preload = CACHE_DIR / "loopback.cjs"
    preload.write_text(LOOPBACK)
    port = free_port()
    proc = subprocess.Popen(
        ["node", "--require", str(preload), str(script), f"--port={port}", "--headless"],
        cwd=script.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", ""), "NODE_ENV": "test"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise PortkeyUnavailable(f"the Portkey gateway exited: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(base + "/", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise PortkeyUnavailable("the Portkey gateway did not start in 60 s")
            time.sleep(0.1)
        yield base
    finally:
        stop_process(proc)

"""Run a real LiteLLM proxy on 127.0.0.1 in a subprocess (tests and benchmarks).

    with running_litellm_proxy(config, workdir) as proxy:
        OpenAI(base_url=proxy.base_url + "/v1", api_key=proxy.master_key)

`config` is the proxy's config.yaml as a dict (written as JSON, which is YAML). The
proxy gets a fresh master key (it refuses to start without one) and uses its bundled
model price list instead of fetching one. This module does not import litellm: it
runs `python -m litellm.proxy.proxy_cli` with the current interpreter.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from deltaguard.gateway.server import free_port


@dataclass(frozen=True, slots=True)
class RunningProxy:
    base_url: str
    master_key: str
    workdir: Path
    process: subprocess.Popen[bytes]


@contextmanager
def running_litellm_proxy(
    config: Mapping[str, Any], workdir: Path, startup_timeout_s: float = 120.0
) -> Iterator[RunningProxy]:
    """Start the proxy, wait until it answers, yield it; SIGTERM (unless it already
    exited) and wait on exit.

    Its output goes to `workdir/proxy.log` (quoted in the error when it fails to start).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "config.yaml"
    config_path.write_text(json.dumps(config, indent=2))
    port = free_port()
    key = "sk-" + secrets.token_hex(32)
    env = {
        **os.environ,
        "LITELLM_MASTER_KEY": key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the remote price list
    }
    log_path = workdir / "proxy.log"
    command = [sys.executable, "-m", "litellm.proxy.proxy_cli", "--config", str(config_path)]
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [*command, "--port", str(port), "--host", "127.0.0.1"],
            env=env,
            cwd=workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + startup_timeout_s
            while True:
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"litellm exited with {proc.returncode}:\n{tail}")
                try:
                    if httpx.get(base + "/health/liveliness", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"litellm did not answer within {startup_timeout_s:g} s")
                time.sleep(0.25)
            yield RunningProxy(base, key, workdir, proc)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def mock_model(
    name: str, answer: str, delay_s: float | None = None, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A `model_list` entry that answers `answer` (after `delay_s`), with `tool_calls` if
    given, without any network."""
    params: dict[str, Any] = {"model": f"openai/{name}", "api_key": "unused", "mock_response": answer}
    if delay_s is not None:
        params["mock_delay"] = delay_s
    if tool_calls is not None:
        params["mock_tool_calls"] = tool_calls
    return {"model_name": name, "litellm_params": params}


def deltaguard_guardrail(name: str = "deltaguard", **params: Any) -> dict[str, Any]:
    """A `guardrails` entry for DeltaGuard on every request, all three modes."""
    return {
        "guardrail_name": name,
        "litellm_params": {
            "guardrail": "deltaguard.integrations.litellm.DeltaGuardGuardrail",
            "mode": ["pre_call", "during_call", "post_call"],
            "default_on": True,
            **params,
        },
    }

"""An ordinary agent loop on real files is left alone: the official SDK over WebSocket, the
default classifiers (the detector in the monitor lane), twelve turns of a coding agent
reading this repository's own files (text nobody wrote for a safety test)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from deltaguard.gateway.config import GatewayConfig
from deltaguard.sinks import MemorySink
from tests.pipeline.gateway.conftest import clients, gateway_thread, recv_until_done

REPO = Path(__file__).resolve().parents[3]
# Files that quote attacks on purpose (the classifiers' own docstrings show a split jailbreak)
# are look-alikes, not ordinary work, and are left out.
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]
FILES = (
    "pyproject.toml",
    "README.md",
    "docs/contract.md",
    "pipeline/gateway/service.py",
    "pipeline/state/scoring.py",
    "pipeline/sinks.py",
    "training/lib/real_text.py",
    "eval/agent_traffic.py",
    "pipeline/cli.py",
    "classifiers/secrets.py",
    "pipeline/worker.py",
    ".gitignore",
)
TASK = "Read setup.py and tell me which dependencies the project declares."
READ_CHARS = 10_000  # what an agent harness passes on of a long file


def test_twelve_turn_tool_loop_on_real_files_is_never_blocked_or_flagged(scorer):
    flags, billing = MemorySink(), MemorySink()
    config = GatewayConfig(port=0, sim_tokens_per_s=20_000)
    files = iter(FILES)
    with gateway_thread(config, scorer, flag_sink=flags, billing_sink=billing) as (base, _):
        _, aclient = clients(base)

        async def run() -> list[str]:
            ids = []
            async with aclient.beta.responses.connect() as conn:
                await conn.send({"type": "response.create", "model": "sim", "input": TASK, "tools": TOOLS})
                for _ in range(12):
                    done = await recv_until_done(conn)
                    assert done.type == "response.completed", done  # a block is an error event
                    resp = done.response
                    assert resp.safety["decision"] == "allow", resp.safety
                    ids.append(resp.id)
                    calls = [o for o in resp.output if o.type == "function_call"]
                    text = (REPO / next(files, "README.md")).read_text(encoding="utf-8")[:READ_CHARS]
                    new = [
                        {"type": "function_call_output", "call_id": c.call_id, "output": text} for c in calls
                    ]
                    new = new or [{"role": "user", "content": "Thanks. Now read the next file."}]
                    await conn.send(
                        {
                            "type": "response.create",
                            "model": "sim",
                            "input": new,
                            "previous_response_id": resp.id,
                        }
                    )
                last = await recv_until_done(conn)
                assert last.type == "response.completed", last
                ids.append(last.response.id)
            return ids

        ids = asyncio.run(run())
        # every turn's monitor and post-inference work is done once it is billed
        deadline = time.monotonic() + 60
        while {e.response_id for e in billing.events} < set(ids):
            assert time.monotonic() < deadline, "some turns were never billed"
            time.sleep(0.05)
    assert [(e.categories, e.scores, e.classifier_versions) for e in flags.events] == []

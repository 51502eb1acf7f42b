"""The gateway end to end, side by side in one run.

    python -m eval.bench_gateway --turns 100 --tool-tokens 1000

1. Time to first token added by the safety stage: the same WebSocket agent loop (each
   turn sends a ~1,000-token tool output) against the gateway with the default gate
   classifiers and against the same gateway with none; p50/p99 of the difference, and
   the gate lane's own latency as the response's `safety` field reports it.
2. A 100-turn agent loop at a simulated 1,000 tokens/s: WebSocket with delta scoring
   against HTTP with the full history resent every turn and rescored from scratch (what
   a gateway with a classic guardrail does); total wall time of each.

Writes eval/out/bench_gateway.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway
from deltaguard.lanes.stage import StageConfig
from deltaguard.state.loading import build_scorer
from deltaguard.state.policy import Policy
from deltaguard.state.scoring import Scorer, Snapshot
from deltaguard.state.store import ConversationStore, LruTtlMap, StoreLimits
from deltaguard.tools.rollouts import tool_output

OUT = Path(__file__).resolve().parent / "out"
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]
TASK = "The test test_retry_after_timeout fails. Find and fix the bug."


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 2 else max(values)


def clients(base: str) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=base + "/v1",
        api_key="bench",
        websocket_base_url=base.replace("http", "ws") + "/v1",
        max_retries=0,
    )


async def ws_loop(base: str, turns: int, tool_tokens: int) -> dict[str, Any]:
    """An agent loop over one socket; per turn: time to first event of output, gate ms."""
    rng = random.Random(11)
    ttft, gate_ms, tokens = [], [], []
    t_start = time.perf_counter()
    async with clients(base).beta.responses.connect() as conn:
        body: dict[str, Any] = {"input": TASK, "tools": TOOLS}
        for _ in range(turns):
            t0 = time.perf_counter()
            await conn.send({"type": "response.create", "model": "sim", **body})
            first = None
            async for event in conn:
                if first is None and event.type in (
                    "response.output_text.delta",
                    "response.output_item.added",
                ):
                    first = time.perf_counter() - t0
                if event.type in ("response.completed", "error", "response.failed"):
                    break
            if event.type != "response.completed":
                raise RuntimeError(f"turn failed: {event}")
            resp = event.response
            ttft.append((first or 0.0) * 1000)
            gate_ms.append(resp.safety["latency_ms"]["total"])
            tokens.append(resp.safety["tokens_scored"])
            calls = [o for o in resp.output if o.type == "function_call"]
            new = [
                {
                    "type": "function_call_output",
                    "call_id": c.call_id,
                    "output": tool_output(rng, tool_tokens),
                }
                for c in calls
            ]
            body = {
                "input": new or [{"role": "user", "content": "Good. Next failing test, please."}],
                "previous_response_id": resp.id,
            }
    return {"wall_s": time.perf_counter() - t_start, "ttft_ms": ttft, "gate_ms": gate_ms, "tokens": tokens}


async def http_full_loop(base: str, turns: int, tool_tokens: int) -> dict[str, Any]:
    """The same loop, stateless: the whole history is resent every turn."""
    rng = random.Random(11)
    client = clients(base)
    history: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    gate_ms, tokens = [], []
    t_start = time.perf_counter()
    for _ in range(turns):
        resp = await client.responses.create(model="sim", input=history, tools=TOOLS)
        gate_ms.append(resp.safety["latency_ms"]["total"])
        tokens.append(resp.safety["tokens_scored"])
        history += [o.model_dump(exclude_none=True) for o in resp.output]
        calls = [o for o in resp.output if o.type == "function_call"]
        history += [
            {"type": "function_call_output", "call_id": c.call_id, "output": tool_output(rng, tool_tokens)}
            for c in calls
        ]
        if not calls:
            history.append({"role": "user", "content": "Good. Next failing test, please."})
    return {"wall_s": time.perf_counter() - t_start, "gate_ms": gate_ms, "tokens": tokens}


async def run(turns: int, tool_tokens: int, rate: float) -> dict[str, Any]:
    scorer = build_scorer()
    base_cfg = GatewayConfig(port=0, sim_tokens_per_s=rate, sim_tool_calls=10**6)
    results: dict[str, Any] = {}
    ttft_turns = min(turns, 60)
    async with running_gateway(base_cfg, Scorer([], Policy())) as (base, _):
        results["ttft_off"] = await ws_loop(base, ttft_turns, tool_tokens)
    async with running_gateway(base_cfg, scorer) as (base, _):
        results["ttft_on"] = await ws_loop(base, ttft_turns, tool_tokens)
    async with running_gateway(base_cfg, scorer) as (base, _):
        results["ws_delta"] = await ws_loop(base, turns, tool_tokens)
    async with running_gateway(base_cfg, scorer, stage_config=StageConfig(store_factory=rescoring_store)) as (
        base,
        _,
    ):
        results["http_full"] = await http_full_loop(base, turns, tool_tokens)
    return results


class _NoSnapshots(LruTtlMap[bytes, Snapshot]):
    """Keeps nothing: every turn refolds its whole history from the empty state."""

    def put(self, key: bytes, value: Snapshot) -> None:
        pass


def rescoring_store(limits: StoreLimits) -> ConversationStore:
    """The baseline every other guardrail is: rescore the whole history at every turn
    (same verdicts as delta mode, only slower)."""
    store = ConversationStore(limits)
    store.snapshots = _NoSnapshots(limits.max_snapshots, limits.ttl_s)
    return store


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--tool-tokens", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=1000.0, help="simulated model tokens/s")
    args = ap.parse_args(argv)
    r = asyncio.run(run(args.turns, args.tool_tokens, args.rate))
    on, off = r["ttft_on"]["ttft_ms"][1:], r["ttft_off"]["ttft_ms"][1:]
    added = [a - b for a, b in zip(on, off, strict=False)]
    summary = {
        "ttft_off_ms_p50": round(statistics.median(off), 3),
        "ttft_on_ms_p50": round(statistics.median(on), 3),
        "ttft_added_ms_p50": round(statistics.median(added), 3),
        "ttft_added_ms_p99": round(pct(added, 99), 3),
        "gate_lane_ms_p50": round(statistics.median(r["ttft_on"]["gate_ms"][1:]), 3),
        "gate_lane_ms_p99": round(pct(r["ttft_on"]["gate_ms"][1:], 99), 3),
        "gate_tokens_per_turn_p50": statistics.median(r["ttft_on"]["tokens"][1:]),
        "loop_turns": args.turns,
        "ws_delta_wall_s": round(r["ws_delta"]["wall_s"], 2),
        "http_full_wall_s": round(r["http_full"]["wall_s"], 2),
        "ws_delta_faster_by": f"{100 * (1 - r['ws_delta']['wall_s'] / r['http_full']['wall_s']):.0f}%",
        "http_full_gate_ms_last": round(r["http_full"]["gate_ms"][-1], 2),
        "ws_delta_gate_ms_last": round(r["ws_delta"]["gate_ms"][-1], 2),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_gateway.json").write_text(json.dumps({"summary": summary, "raw": r}, indent=1) + "\n")
    width = max(map(len, summary))
    for k, v in summary.items():
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Load: many concurrent WebSocket agent conversations against one gateway process.

    python -m eval.bench_load --conversations 500 --turns 50 --tool-tokens 200

Starts `deltaguard serve` (simulated model) as its own process on 127.0.0.1 and drives
N concurrent agent conversations over WebSocket, each continuing its previous response
with only its new tool output. Reports errors by code (target 0), per-turn safety
latency p50/p99 (the gate lane, as each response's `safety` field reports it), turn
round-trip p50/p99, server memory per conversation (RSS growth / conversations), and
what the limits did (refused connections, shed requests). Writes eval/out/bench_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import websockets

from deltaguard.gateway.server import free_port
from deltaguard.tools.rollouts import tool_output

OUT = Path(__file__).resolve().parent / "out"
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def conversation(url: str, turns: int, tool_tokens: int, seed: int, stats: dict[str, Any]) -> None:
    rng = random.Random(seed)
    try:
        async with websockets.connect(url, max_size=None, open_timeout=60) as ws:
            body: dict[str, Any] = {"input": f"task {seed}: fix the failing test", "tools": TOOLS}
            for _ in range(turns):
                t0 = time.perf_counter()
                await ws.send(json.dumps({"type": "response.create", "model": "sim", **body}))
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] in ("response.completed", "error", "response.failed"):
                        break
                stats["rtt_ms"].append((time.perf_counter() - t0) * 1000)
                if event["type"] != "response.completed":
                    stats["errors"][event.get("error", {}).get("code", event["type"])] += 1
                    return
                resp = event["response"]
                stats["safety_ms"].append(resp["safety"]["latency_ms"]["total"])
                stats["turns"] += 1
                calls = [o for o in resp["output"] if o["type"] == "function_call"]
                new = [
                    {
                        "type": "function_call_output",
                        "call_id": c["call_id"],
                        "output": tool_output(rng, tool_tokens),
                    }
                    for c in calls
                ] or [{"role": "user", "content": "next step please"}]
                body = {"input": new, "previous_response_id": resp["id"]}
    except (OSError, websockets.WebSocketException) as exc:
        stats["errors"][type(exc).__name__] += 1


async def drive(url: str, n: int, turns: int, tool_tokens: int) -> dict[str, Any]:
    stats: dict[str, Any] = {"rtt_ms": [], "safety_ms": [], "turns": 0, "errors": collections.Counter()}
    await asyncio.gather(*(conversation(url, turns, tool_tokens, i, stats) for i in range(n)))
    return stats


def pct(values: list[float], q: int) -> float:
    return round(statistics.quantiles(values, n=100)[q - 1], 3) if len(values) > 2 else 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=500)
    ap.add_argument("--turns", type=int, default=50)
    ap.add_argument("--tool-tokens", type=int, default=200)
    ap.add_argument("--rate", type=float, default=1000.0, help="simulated model tokens/s")
    args = ap.parse_args(argv)
    port = free_port()
    cmd = [sys.executable, "-m", "deltaguard.cli", "serve", "--port", str(port), "--log-level", "warning"]
    cmd += ["--sim-tokens-per-s", str(args.rate), "--spool", os.devnull]
    server = subprocess.Popen(cmd)
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        rss_before = rss_mb(server.pid)
        t0 = time.perf_counter()
        stats = asyncio.run(
            drive(f"ws://127.0.0.1:{port}/v1/responses", args.conversations, args.turns, args.tool_tokens)
        )
        wall = time.perf_counter() - t0
        rss_after = rss_mb(server.pid)
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    finally:
        server.terminate()
        server.wait(60)
    shed = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("deltaguard_requests_total") and "server_overloaded" in line
    )
    summary = {
        "conversations": args.conversations,
        "turns_per_conversation": args.turns,
        "tool_tokens": args.tool_tokens,
        "turns_completed": stats["turns"],
        "errors": dict(stats["errors"]),
        "wall_s": round(wall, 1),
        "turns_per_s": round(stats["turns"] / wall, 1),
        "safety_ms_p50": pct(stats["safety_ms"], 50),
        "safety_ms_p99": pct(stats["safety_ms"], 99),
        "turn_rtt_ms_p50": pct(stats["rtt_ms"], 50),
        "turn_rtt_ms_p99": pct(stats["rtt_ms"], 99),
        "server_rss_mb_before": round(rss_before, 1),
        "server_rss_mb_after": round(rss_after, 1),
        "server_kb_per_conversation": round((rss_after - rss_before) * 1024 / args.conversations, 1),
        "requests_shed_503": shed,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "bench_load.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if not stats["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

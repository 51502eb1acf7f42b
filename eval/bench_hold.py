"""What verdict-before-release costs: the model's tool call held for the monitor verdict.

    python -m eval.bench_hold --monitor-ms 300 --reps 10

A turn that carries a tool output (untrusted input) goes through the gateway to a
scripted model that says a few words, then calls a tool after its first-action time
(0, 200 and 800 ms, the model's time to its first actionable item). The monitor lane
takes `--monitor-ms` per turn (a stand-in with a fixed cost, so that the figures are the
hold's, not a classifier's). Side by side in one run, two gateways:

- `hold`: `release_hold="actions"` (the default): the call waits for the verdict;
- `immediate`: `release_hold="off"`: the call is released as the model makes it.

Measured at the client (the official SDK over SSE): the time from the request to the
tool call's `response.output_item.added`, median over `--reps` turns. The added latency
should be close to max(0, monitor time - first-action time). Writes eval/out/hold.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
from pathlib import Path

from openai import AsyncOpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway
from deltaguard.state.scoring import Scorer
from tests.support.toy import SlowInjectionMarker
from tests.support.upstreams import ToolCallingUpstream

OUT = Path(__file__).resolve().parent / "out"
TOOLS = [{"type": "function", "name": "fetch", "parameters": {"type": "object", "properties": {}}}]
FIRST_ACTION_MS = (0, 200, 800)


async def time_to_call(client: AsyncOpenAI, i: int) -> float:
    """Seconds from the request to the tool call reaching the client (a benign turn)."""
    history = [
        {"role": "user", "content": f"What is the weather in city {i}?"},
        {"type": "function_call", "call_id": f"call_{i}", "name": "fetch", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"call_{i}", "output": f"<p>City {i}: sunny.</p>"},
    ]
    start = time.perf_counter()
    stream = await client.responses.create(model="m", input=history, tools=TOOLS, stream=True)
    seen = None
    async for event in stream:
        if seen is None and event.type == "response.output_item.added" and event.item.type == "function_call":
            seen = time.perf_counter() - start
    if seen is None:
        raise RuntimeError("the model's tool call never reached the client")
    return seen


async def run(monitor_ms: float, reps: int) -> list[dict[str, float]]:
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        upstreams = {}
        for mode, hold in (("hold", "actions"), ("immediate", "off")):
            upstream = upstreams[mode] = ToolCallingUpstream()
            scorer = Scorer([SlowInjectionMarker(delay_s=monitor_ms / 1000)])
            config = GatewayConfig(port=0, release_hold=hold)
            base, _ = await stack.enter_async_context(running_gateway(config, scorer, upstream=upstream))
            clients[mode] = AsyncOpenAI(base_url=base + "/v1", api_key="bench", max_retries=0)
        n = 0
        for first_ms in FIRST_ACTION_MS:
            row: dict[str, float] = {"first_action_ms": first_ms}
            for mode, client in clients.items():
                upstreams[mode].first_action_s = first_ms / 1000
                await time_to_call(client, n)  # warm-up
                times = []
                for _ in range(reps):
                    n += 1
                    times.append(await time_to_call(client, n))
                row[mode] = statistics.median(times) * 1000
            row["added"] = row["hold"] - row["immediate"]
            row["expected"] = max(0.0, monitor_ms - first_ms)
            rows.append(row)
    return rows


def report(rows: list[dict[str, float]], monitor_ms: float, reps: int) -> str:
    lines = [
        f"# Verdict before release: added latency (monitor {monitor_ms:g} ms, median of {reps} turns)",
        "",
        "| first action (ms) | release immediately (ms) | hold for verdict (ms) | added (ms) "
        "| max(0, monitor - first action) (ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['first_action_ms']:.0f} | {r['immediate']:.1f} | {r['hold']:.1f} "
            f"| {r['added']:.1f} | {r['expected']:.0f} |"
        )
    lines += [
        "",
        "Time from the request to the tool call's `response.output_item.added` at the client (SSE).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--monitor-ms", type=float, default=300.0, help="the monitor lane's time per turn")
    p.add_argument("--reps", type=int, default=10, help="turns per cell (median)")
    args = p.parse_args(argv)
    rows = asyncio.run(run(args.monitor_ms, args.reps))
    text = report(rows, args.monitor_ms, args.reps)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "hold.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

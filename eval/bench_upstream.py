"""Both hops delta-only: an agent loop through the gateway, upstream over WebSocket or HTTP.

    python -m eval.bench_upstream --turns 40 --tool-tokens 1000 --prefill-us 20

One coding-agent conversation (the official SDK's WebSocket client, each turn only its
new tool output with `previous_response_id`) through `deltaguard serve`'s app in front of
the reasoning test upstream (reasoning items, usage; it charges `--prefill-us`
microseconds per input token it has not computed before). Side by side in one run:

- `websocket`: the gateway keeps one upstream WebSocket for the conversation and sends
  only the new items with the upstream's `previous_response_id` (upstream_mode "auto");
- `http`: the gateway resends the whole history over HTTP with `store: false` every
  turn (upstream_mode "http"); the model reuses its prefix cache (as hosted models do),
  so both modes prefill the same tokens and the difference is the hop itself: bytes
  sent, parsed and hashed again every turn.

Reports per mode the loop's wall time, bytes the upstream received per turn (first,
median, last) and its uncached input tokens, and the ratios. Writes
eval/out/bench_upstream.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway
from deltaguard.state.loading import build_scorer
from deltaguard.tools.rollouts import tool_output
from tests.support.reasoning_upstream import async_running_reasoning_upstream, coding_agent_policy

OUT = Path(__file__).resolve().parent / "out"
TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file of the repository.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


async def agent_loop(base: str, turns: int, tool_tokens: int, cache_key: str | None) -> float:
    """The loop's wall time: a task, then `turns` tool outputs, each answered by the model.

    A plain WebSocket client (the protocol the official SDK speaks), so that the figures
    are the gateway's and the model's, not a client library's event parsing."""
    import random

    import websockets

    rng = random.Random(7)
    extra = {"prompt_cache_key": cache_key} if cache_key else {}
    body = {"model": "gpt-test", "tools": TOOLS, "include": ["reasoning.encrypted_content"], **extra}
    t0 = time.perf_counter()
    async with websockets.connect(base.replace("http", "ws") + "/v1/responses", max_size=None) as ws:
        await ws.send(
            json.dumps({"type": "response.create", "input": "Fix the failing test in src/.", **body})
        )
        for turn in range(turns + 1):
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "error":
                    raise RuntimeError(f"turn {turn}: {event['error']}")
                if event["type"] == "response.completed":
                    final = event["response"]
                    break
            if turn == turns:
                break
            follow: list[dict[str, Any]] = [
                {
                    "type": "function_call_output",
                    "call_id": o["call_id"],
                    "output": tool_output(rng, tool_tokens),
                }
                for o in final["output"]
                if o["type"] == "function_call"
            ] or [{"role": "user", "content": "Go on."}]
            frame = {"type": "response.create", "input": follow, "previous_response_id": final["id"], **body}
            await ws.send(json.dumps(frame))
    return time.perf_counter() - t0


def _uncached(usage: dict[str, Any]) -> int:
    return int(usage.get("input_tokens", 0)) - int(
        (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    )


async def run_mode(mode: str, args: argparse.Namespace, scorer: Any, cache_key: str | None) -> dict[str, Any]:
    policy = coding_agent_policy(calls=10**6)  # a tool call every turn, as in a long agent loop
    async with async_running_reasoning_upstream(policy, args.prefill_us / 1e6) as (upstream, recorder):
        config = GatewayConfig(port=0, upstream=upstream, upstream_mode=mode)
        async with running_gateway(config, scorer) as (base, _):
            wall = await agent_loop(base, args.turns, args.tool_tokens, cache_key)
        requests = [r for r in recorder.requests if r.generate]
    sizes = [r.raw_bytes for r in requests]
    uncached = [_uncached(r.usage or {}) for r in requests]
    return {
        "wall_s": round(wall, 3),
        "transports": sorted({r.transport for r in requests}),
        "upstream_requests": len(requests),
        "upstream_bytes_first_median_last": [sizes[0], int(statistics.median(sizes)), sizes[-1]],
        "upstream_bytes_total": sum(sizes),
        "uncached_input_tokens_total": sum(uncached),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    scorer = build_scorer()
    results = {
        "websocket": await run_mode("auto", args, scorer, "bench"),
        "http": await run_mode("http", args, scorer, "bench"),
    }
    ws = results["websocket"]
    for name in ("http",):
        results[name]["wall_over_websocket"] = round(results[name]["wall_s"] / ws["wall_s"], 2)
        results[name]["bytes_over_websocket"] = round(
            results[name]["upstream_bytes_total"] / ws["upstream_bytes_total"], 1
        )
    return {"config": {k: v for k, v in vars(args).items() if k != "out"}, "results": results}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--tool-tokens", type=int, default=1000)
    ap.add_argument("--prefill-us", type=float, default=20.0, help="upstream cost per uncached input token")
    ap.add_argument("--out", type=Path, default=OUT / "bench_upstream.json")
    args = ap.parse_args(argv)
    out: Path = args.out
    data = asyncio.run(main_async(args))
    data["config"]["out"] = str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2))
    json.dump(data["results"], sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

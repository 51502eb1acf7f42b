"""The guard API's added latency, side by side with the in-process stage in one run.

    python -m eval.bench_guard --turns 50 --tool-tokens 1000 --conversations 4

A coding-agent conversation of `--turns` turns, each adding a tool call and a tool
output of about `--tool-tokens` tokens (the delta), is checked turn by turn:

- `stage`: `SafetyStage.check_turn` in process (the floor: classifiers on the delta);
- `guard_id`: `POST /v1/guard/input` with the previous `continuation_id` and the new
  messages only;
- `guard_prefix`: `POST /v1/guard/input` with the whole history (no id; the hash chain
  finds the scored prefix);

each followed by its output check, untimed. The gateway runs on 127.0.0.1 in this
process; the client is httpx with keep-alive. Reports p50/p99 of each call's wall time
and of the guard's added latency (guard minus stage, turn by turn), and the mean tokens
scored per turn. Writes eval/out/bench_guard.json.
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

import httpx

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway
from deltaguard.integrations.chat_items import chat_history_items, chat_output_items
from deltaguard.lanes.stage import SafetyStage
from deltaguard.state.loading import build_scorer
from deltaguard.tools.rollouts import tool_output

OUT = Path(__file__).resolve().parent / "out"


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 2 else max(values)


def conversation(turns: int, tool_tokens: int, seed: int) -> list[tuple[list[dict], dict]]:
    """Per turn: (the new messages, the model's answer)."""
    rng = random.Random(seed)
    out: list[tuple[list[dict], dict]] = []
    new: list[dict] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "The test test_retry_after_timeout fails. Find and fix the bug."},
    ]
    for i in range(turns):
        fn = {"name": "read_file", "arguments": json.dumps({"path": f"src/mod_{i}.py"})}
        answer = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
        }
        out.append((new, answer))
        new = [{"role": "tool", "tool_call_id": f"c{i}", "content": tool_output(rng, tool_tokens)}]
    return out


async def run(turns: int, tool_tokens: int, conversations: int) -> dict[str, Any]:
    scorer = build_scorer()
    stage = SafetyStage(scorer)
    await stage.start()
    times: dict[str, list[float]] = {"stage": [], "guard_id": [], "guard_prefix": []}
    tokens: dict[str, list[int]] = {k: [] for k in times}
    async with (
        running_gateway(
            GatewayConfig(port=0, api_keys={"k-id": "by-id", "k-prefix": "by-prefix"}), scorer
        ) as (
            base,
            _,
        ),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        for c in range(conversations):
            parent = None
            cid = None
            history: list[dict] = []
            for turn, (new, answer) in enumerate(conversation(turns, tool_tokens, seed=c)):
                first = turn == 0  # warm-up turns are not counted
                # In process: the floor.
                t0 = time.perf_counter()
                gate = await stage.check_turn(f"r{c}_{turn}", chat_history_items(new), parent)
                times["stage"].append((time.perf_counter() - t0) * 1000)
                tokens["stage"].append(gate.verdict.tokens_scored)
                await stage.resume(gate.tenant, gate.response_id).check_output(chat_output_items(answer))
                parent = gate.response_id
                # The guard API with a continuation id: only the new messages.
                body = {"messages": new, **({"continuation_id": cid} if cid else {})}
                t0 = time.perf_counter()
                r = await client.post("/v1/guard/input", json=body, headers={"authorization": "Bearer k-id"})
                times["guard_id"].append((time.perf_counter() - t0) * 1000)
                v = r.json()
                tokens["guard_id"].append(v["tokens_scored"])
                await client.post(
                    "/v1/guard/output",
                    json={"continuation_id": v["continuation_id"], "message": answer},
                    headers={"authorization": "Bearer k-id"},
                )
                cid = v["continuation_id"]
                # The guard API with the whole history, no id.
                history += new
                t0 = time.perf_counter()
                r = await client.post(
                    "/v1/guard/input",
                    json={"messages": history},
                    headers={"authorization": "Bearer k-prefix"},
                )
                times["guard_prefix"].append((time.perf_counter() - t0) * 1000)
                tokens["guard_prefix"].append(r.json()["tokens_scored"])
                await client.post(
                    "/v1/guard/output",
                    json={"messages": history, "message": answer},
                    headers={"authorization": "Bearer k-prefix"},
                )
                history.append(answer)
                if first:
                    for k in times:
                        times[k].pop()
                        tokens[k].pop()
    await stage.aclose()
    report: dict[str, Any] = {"turns": turns, "tool_tokens": tool_tokens, "conversations": conversations}
    for k, v in times.items():
        report[k] = {
            "p50_ms": round(pct(v, 50), 3),
            "p99_ms": round(pct(v, 99), 3),
            "mean_tokens_scored": round(statistics.mean(tokens[k]), 1),
        }
    for k in ("guard_id", "guard_prefix"):
        added = [g - s for g, s in zip(times[k], times["stage"], strict=True)]
        report[f"{k}_added"] = {"p50_ms": round(pct(added, 50), 3), "p99_ms": round(pct(added, 99), 3)}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--tool-tokens", type=int, default=1000)
    parser.add_argument("--conversations", type=int, default=4)
    args = parser.parse_args()
    report = asyncio.run(run(args.turns, args.tool_tokens, args.conversations))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_guard.json").write_text(json.dumps(report, indent=2))
    print(f"{'':16} {'p50 ms':>8} {'p99 ms':>8} {'tokens/turn':>12}")
    for k in ("stage", "guard_id", "guard_prefix"):
        r = report[k]
        print(f"{k:16} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['mean_tokens_scored']:12.1f}")
    for k in ("guard_id_added", "guard_prefix_added"):
        r = report[k]
        print(f"{k:16} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f}")


if __name__ == "__main__":
    main()

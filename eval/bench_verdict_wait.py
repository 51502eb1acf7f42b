"""What a continuation pays to wait for the monitor verdict judged on another replica.

    python -m eval.bench_verdict_wait --monitor-ms 300 --reps 10

Two gateway replicas on one Redis (a redis-server started here), an agent's model that
answers every turn with a tool call, and a monitor lane that takes `--monitor-ms` per
turn (a stand-in with a fixed cost, so that the figures are the wait's, not a
classifier's). A benign tool output is sent to replica A; its continuation goes to
replica B, which reads the conversation's flags once A's verdict is in. Side by side in
one run, two pairs of replicas:

- `wait`: `monitor_verdict_wait_s = 10` (the continuation waits for the verdict);
- `no wait`: `monitor_verdict_wait_s = 0` (the continuation reads the flags as they are).

Three ways of continuing, each a row:

- `release_hold="off"`, at once: A answers before its verdict, B gets the continuation
  while the verdict is still to come (the case the wait is for);
- `release_hold="off"`, once the verdicts are in (the client waits 2 x `--monitor-ms` +
  100 ms: A's lane judges the conversation's two turns one after the other);
- `release_hold="actions"` (the default), at once: A's answer waited for the verdict.

Measured at the client (the official SDK): the continuation's request to its response,
median and p90 over `--reps` conversations; and on B, the time its gate spent waiting
(`PendingVerdicts.wait_s`, the added latency itself, free of the client's noise).

Then what the bookkeeping costs every turn when nothing is pending, over `--turns`
turns on the same Redis: on the request path, the gate's read of the conversation's
pending jobs and the notes of the turn and of its output (one round trip each); in the
monitor lane, its read of outputs pending elsewhere and the two clearings.
Writes eval/out/verdict_wait.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from openai import AsyncOpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import running_gateway
from deltaguard.lanes.pending_verdicts import PendingVerdicts, VerdictWait
from deltaguard.state.backends import open_backend
from deltaguard.state.scoring import Scorer
from tests.support.state_servers import redis_server
from tests.support.toy import ItemCounter, SlowInjectionMarker
from tests.support.upstreams import ToolCallingUpstream

OUT = Path(__file__).resolve().parent / "out"
TOOLS = [{"type": "function", "name": "fetch", "parameters": {"type": "object", "properties": {}}}]
CASES = (("off", "at once"), ("off", "verdicts in"), ("actions", "at once"))


@dataclass
class Replicas:
    a: AsyncOpenAI
    b: AsyncOpenAI
    b_verdicts: PendingVerdicts  # B's: how long its gate waited


async def continuation_s(pair: Replicas, i: int, pause_s: float) -> tuple[float, float]:
    """Seconds B takes to answer the continuation of a benign tool output A answered, and
    of those, how long its gate waited for A's verdicts."""
    a, b = pair.a, pair.b
    first = await a.responses.create(model="m", input=f"What is the weather in city {i}?", tools=TOOLS)
    [call] = [o for o in first.output if o.type == "function_call"]
    output = [{"type": "function_call_output", "call_id": call.call_id, "output": f"<p>City {i}: sunny.</p>"}]
    second = await a.responses.create(model="m", input=output, previous_response_id=first.id, tools=TOOLS)
    await asyncio.sleep(pause_s)
    waited = pair.b_verdicts.wait_s
    start = time.perf_counter()
    third = await b.responses.create(model="m", input="thanks", previous_response_id=second.id, tools=TOOLS)
    took = time.perf_counter() - start
    if third.status != "completed":
        raise RuntimeError(f"the benign continuation ended {third.status}")
    return took, pair.b_verdicts.wait_s - waited


async def run(
    monitor_ms: float, reps: int, turns: int
) -> tuple[list[dict[str, object]], dict[str, tuple[float, float]]]:
    rows: list[dict[str, object]] = []
    with redis_server() as url:
        open_backend(url)._client.flushdb()
        async with contextlib.AsyncExitStack() as stack:
            pairs: dict[tuple[str, str], Replicas] = {}
            for hold in ("off", "actions"):
                for mode, wait_s in (("wait", 10.0), ("no wait", 0.0)):
                    config = GatewayConfig(
                        port=0, state=url, release_hold=hold, monitor_verdict_wait_s=wait_s
                    )
                    clients, apps = [], []
                    for _ in range(2):
                        scorer = Scorer([ItemCounter(), SlowInjectionMarker(delay_s=monitor_ms / 1000)])
                        base, app = await stack.enter_async_context(
                            running_gateway(config, scorer, upstream=ToolCallingUpstream(tool="fetch"))
                        )
                        clients.append(AsyncOpenAI(base_url=base + "/v1", api_key="bench", max_retries=0))
                        apps.append(app)
                    verdicts = apps[1].state.gateway.stage.lockout.verdicts
                    pairs[(hold, mode)] = Replicas(clients[0], clients[1], verdicts)
            n = 0
            for hold, when in CASES:
                pause = (2 * monitor_ms + 100) / 1000 if when == "verdicts in" else 0.0
                row: dict[str, object] = {"hold": hold, "when": when}
                for mode in ("wait", "no wait"):
                    await continuation_s(pairs[(hold, mode)], n, pause)  # warm-up
                    times, waits = [], []
                    for _ in range(reps):
                        n += 1
                        took, waited = await continuation_s(pairs[(hold, mode)], n, pause)
                        times.append(took * 1000)
                        waits.append(waited * 1000)
                        await asyncio.sleep(2 * monitor_ms / 1000)  # every lane idle again
                    row[mode] = (statistics.median(times), pct(times, 0.9))
                    if mode == "wait":
                        row["gate wait"] = (statistics.median(waits), max(waits))
                rows.append(row)
        costs = await bookkeeping(url, turns)
    return rows, costs


async def bookkeeping(url: str, turns: int) -> dict[str, tuple[float, float]]:
    """Per turn, ms (p50, p99): the request path's and the monitor lane's part."""
    verdicts = PendingVerdicts(VerdictWait(), open_backend(url))
    verdicts.judged = True
    path, lane = [], []
    for i in range(turns):
        conversation = f"bookkeeping-{i % 50}"
        start = time.perf_counter()
        await verdicts.wait("bench", conversation)  # the gate
        verdicts.note("bench", conversation, f"r{i}")  # the turn queued to the lane
        verdicts.note("bench", conversation, f"r{i}", output=True)  # its output, at finish
        queued = time.perf_counter()
        await verdicts.outputs_in("bench", conversation)
        verdicts.done("bench", conversation, f"r{i}")
        verdicts.done("bench", conversation, f"r{i}", output=True)
        path.append((queued - start) * 1000)
        lane.append((time.perf_counter() - queued) * 1000)
    return {
        name: (pct(ms, 0.5), pct(ms, 0.99)) for name, ms in (("request path", path), ("monitor lane", lane))
    }


def pct(values: list[float], q: float) -> float:
    return sorted(values)[int(q * (len(values) - 1))]


def report(
    rows: list[dict[str, object]], monitor_ms: float, reps: int, costs: dict[str, tuple[float, float]]
) -> str:
    lines = [
        f"# Waiting for another replica's monitor verdict (monitor {monitor_ms:g} ms, {reps} conversations)",
        "",
        "| release hold | continued | no wait p50 / p90 (ms) | wait p50 / p90 (ms) | added p50 (ms) "
        "| B's gate waited p50 / max (ms) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        (w50, w90), (n50, n90) = r["wait"], r["no wait"]  # type: ignore[misc]
        g50, gmax = r["gate wait"]  # type: ignore[misc]
        cells = f"{n50:.1f} / {n90:.1f} | {w50:.1f} / {w90:.1f} | {w50 - n50:+.1f} | {g50:.2f} / {gmax:.2f}"
        lines.append(f"| {r['hold']} | {r['when']} | {cells} |")
    lines += [
        "",
        "The continuation's request to its response at the client; it reaches the replica",
        "that did not judge the turn before it (two gateways on one Redis).",
        "",
        "Bookkeeping per turn, nothing pending (ms):",
        "",
        "| where | p50 | p99 |",
        "|---|---:|---:|",
        *(f"| {name} | {p50:.3f} | {p99:.3f} |" for name, (p50, p99) in costs.items()),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--monitor-ms", type=float, default=300.0, help="the monitor lane's time per turn")
    p.add_argument("--reps", type=int, default=10, help="conversations per cell")
    p.add_argument("--turns", type=int, default=2000, help="turns of the bookkeeping measurement")
    args = p.parse_args(argv)
    # Without the wait, B's monitor lane fails on the turns whose record A's lane has not
    # written yet (one of the things the wait prevents): logged by the lane, not shown here.
    logging.getLogger("deltaguard.stage").setLevel(logging.CRITICAL)
    rows, costs = asyncio.run(run(args.monitor_ms, args.reps, args.turns))
    text = report(rows, args.monitor_ms, args.reps, costs)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "verdict_wait.md").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

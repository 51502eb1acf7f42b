"""Soak: two tenants against a live gateway for a bounded time, attacks mixed into the load.

    python -m eval.soak --duration 600          # ten minutes (at most an hour, 500k requests)

Starts `deltaguard serve` (the simulated model, tenant keys, billing, spool and recording
to files in a temporary folder) on 127.0.0.1 and nowhere else, then:

1. unloaded (a tenth of the time, at least 20 s or a third): the well-behaved tenant alone,
   for its unloaded latency. It is a client of its own (a process with four agents), as a
   tenant is: beside the load's event loop, its latency would count that loop's delays;
2. load: the well-behaved tenant as before, while the other sends a mixed load (JSON, SSE
   and WebSocket turns, guard checks) and the attacks of `eval/soak_attacks.py` (random
   1 MiB-scale item type names, large and deeply nested requests, bad usage, cross-site
   and rebound requests, secrets in unscored fields, disconnects mid-stream, slow headers).
   Its first part (`--load-warmup`, a fifth of the time by default) fills the gateway's
   bounded stores: RSS is judged after it, on what a gateway at its steady state holds;
3. SIGTERM with a burst of HTTP and WebSocket turns in flight.

Reports requests, outcomes by code, billing events against the responses that had to be
billed (lost, doubled), RSS over time (and its spread after the load's warm-up and over
the last five minutes), p50/p99 per tenant and phase and of the well-behaved tenant per
window, which attacks its slow requests overlapped, the size of /metrics, and whether a
secret reached the recording store. Writes eval/out/soak.json and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import websockets

from deltaguard.gateway.server import free_port
from eval.soak_attacks import ATTACKS, AWS_KEY, CARD, Tally, bearer, large_request, outcome_of, slow_headers

OUT = Path(__file__).resolve().parent / "out"
KEYS = {"steady": "key-steady", "noisy": "key-noisy"}
MAX_DURATION_S = 3600
MAX_REQUESTS = 500_000
SLOW_S = 0.2  # a well-behaved request slower than this is traced to the attacks it overlapped
STEADY_WORKERS = 4  # the well-behaved tenant's agents


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def state_mb(exposition: str) -> dict[str, float]:
    """MiB the gateway's state stores hold, per "lane/kind", from its /metrics text."""
    out: dict[str, float] = {}
    for line in exposition.splitlines():
        if line.startswith("deltaguard_state_bytes{"):
            inside = line[line.index("{") + 1 : line.index("}")]
            labels = {k: v.strip('"') for k, v in (part.split("=", 1) for part in inside.split(","))}
            key = f"{labels['lane']}/{labels['kind']}"
            out[key] = round(out.get(key, 0.0) + float(line.rsplit(" ", 1)[1]) / (1 << 20), 2)
    return out


def start_gateway(folder: Path, rate: float, state_max_mb: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "DELTAGUARD_API_KEYS": ",".join(f"{t}:{k}" for t, k in KEYS.items())}
    env["DELTAGUARD_STATE_MAX_BYTES"] = str(state_max_mb << 20)  # reached within the soak: RSS levels
    env["DELTAGUARD_ITEM_CACHE_BYTES"] = str(state_max_mb << 20)  # the chat and guard APIs' too
    cmd = [sys.executable, "-m", "deltaguard.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--sim-tokens-per-s", str(rate), "--log-level", "warning"]
    cmd += ["--billing", str(folder / "billing.jsonl"), "--spool", str(folder / "spool.jsonl")]
    cmd += ["--record", str(folder / "recorded.db")]
    log = (folder / "gateway.log").open("wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((folder / "gateway.log").read_text()[-3000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the gateway did not start in 120 s")


class Soak:
    def __init__(
        self,
        base: str,
        pid: int,
        duration_s: float,
        max_requests: int,
        seed: int,
        large_every_s: float = 10.0,
        load_warmup_s: float | None = None,
    ) -> None:
        self.large_every_s = large_every_s
        self.base, self.pid = base, pid
        self.t0 = time.monotonic()
        self.warmup_s = max(min(20.0, duration_s / 3), duration_s / 10)
        self.load_warmup_s = duration_s / 5 if load_warmup_s is None else load_warmup_s
        self.end = self.t0 + duration_s
        self.max_requests = max_requests
        self.steady_cap = max_requests // 2  # the well-behaved tenant's process counts its own
        self.rng = random.Random(seed)
        self.tally = Tally()
        self.rss: list[tuple[float, float]] = []
        self.state: list[tuple[float, dict[str, float]]] = []  # MiB per "lane/kind"

    def running(self) -> bool:
        cap = self.max_requests - self.steady_cap
        return time.monotonic() < self.end and sum(self.tally.requests.values()) < cap

    def loaded(self) -> bool:
        return time.monotonic() - self.t0 >= self.warmup_s

    async def noisy(self, n: int) -> None:
        """The other tenant's mixed load, from the end of the warm-up."""
        key = KEYS["noisy"]
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as client:
            while self.running():
                if not self.loaded():
                    await asyncio.sleep(0.5)
                    continue
                kind = self.rng.choice(("json", "sse", "ws", "guard"))
                t = time.monotonic()
                try:
                    await getattr(self, f"_{kind}")(client, key)
                except (httpx.HTTPError, websockets.WebSocketException, OSError) as exc:
                    self.tally.saw(f"noisy:{kind}", f"transport {type(exc).__name__}")
                self.tally.latency_s.setdefault("noisy", []).append((t - self.t0, time.monotonic() - t))
                await asyncio.sleep(0.05)

    async def _json(self, client: httpx.AsyncClient, key: str) -> None:
        r = await client.post("/v1/responses", json={"model": "m", "input": "summarise"}, headers=bearer(key))
        if r.status_code == 200:
            self.tally.billable.add(r.json()["id"])
        self.tally.saw("noisy:json", outcome_of(r))

    async def _sse(self, client: httpx.AsyncClient, key: str) -> None:
        body = {"model": "m", "input": "stream it", "stream": True}
        async with client.stream("POST", "/v1/responses", json=body, headers=bearer(key)) as r:
            terminal = str(r.status_code)
            async for line in r.aiter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event["type"] == "response.completed":
                        self.tally.billable.add(event["response"]["id"])
                        terminal = "200 ok"
        self.tally.saw("noisy:sse", terminal)

    async def _ws(self, client: httpx.AsyncClient, key: str, turns: int = 3) -> None:
        url = self.base.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(url, additional_headers=bearer(key), max_size=None) as ws:
            previous = None
            for turn in range(turns):
                body = {"type": "response.create", "model": "m", "input": f"turn {turn}"}
                if previous:
                    body["previous_response_id"] = previous
                await ws.send(json.dumps(body))
                while True:
                    event = json.loads(await ws.recv())
                    if event["type"] in ("response.completed", "response.failed", "error"):
                        break
                code = event.get("error", {}).get("code", "ok") if event["type"] == "error" else "ok"
                self.tally.saw("noisy:ws", f"{event['type']} {code}")
                if event["type"] == "response.completed":
                    previous = event["response"]["id"]
                    self.tally.billable.add(previous)

    async def _guard(self, client: httpx.AsyncClient, key: str) -> None:
        body = {
            "messages": [{"role": "user", "content": f"question {self.rng.randrange(10**9)}"}],
            "message": {"role": "assistant", "content": "an answer"},
            "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        }
        r = await client.post("/v1/guard/output", json=body, headers=bearer(key))
        if r.status_code == 200:
            self.tally.billable.add(r.json()["continuation_id"])
        self.tally.saw("noisy:guard", outcome_of(r))

    async def attacks(self) -> None:
        """One attack a second, a large request every `large_every_s`, slow headers every minute."""
        key = KEYS["noisy"]
        last_large = last_slow = 0.0
        async with httpx.AsyncClient(base_url=self.base, timeout=120) as client:
            while self.running():
                if not self.loaded():
                    await asyncio.sleep(0.5)
                    continue
                now = time.monotonic()
                attack = self.rng.choice(ATTACKS)
                if self.large_every_s and now - last_large >= self.large_every_s:
                    attack, last_large = large_request, now
                elif now - last_slow >= 60:
                    attack, last_slow = slow_headers, now
                start = time.monotonic() - self.t0
                try:
                    await attack(client, key, self.tally, self.rng)
                except (httpx.HTTPError, websockets.WebSocketException, OSError) as exc:
                    self.tally.saw(f"attack:{attack.__name__}", f"transport {type(exc).__name__}")
                self.tally.spans.append((attack.__name__, start, time.monotonic() - self.t0))
                await asyncio.sleep(1.0)

    async def sample_rss(self) -> None:
        """RSS every 5 s; every 15 s, what the state stores hold (`deltaguard_state_bytes`)."""
        async with httpx.AsyncClient(base_url=self.base, timeout=30) as client:
            n = 0
            while self.running():
                at = round(time.monotonic() - self.t0, 1)
                self.rss.append((at, round(rss_mb(self.pid), 1)))
                if n % 3 == 0:
                    with contextlib.suppress(httpx.HTTPError):
                        r = await client.get("/metrics", headers=bearer(KEYS["steady"]))
                        self.state.append((at, state_mb(r.text)))
                n += 1
                await asyncio.sleep(5.0)

    async def run(self) -> None:
        # The well-behaved tenant is a client of its own: sharing the noisy load's event loop,
        # its latency would count the time that loop took to get back to it.
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            loop = asyncio.get_running_loop()
            steady = loop.run_in_executor(
                pool, steady_tenant, self.base, self.t0, self.end, self.steady_cap, STEADY_WORKERS
            )
            noisy = asyncio.gather(*(self.noisy(n) for n in range(6)))
            *_, tally = await asyncio.gather(noisy, self.attacks(), self.sample_rss(), steady)
        self.tally.absorb(tally)

    async def shutdown_burst(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM with ten HTTP and ten WebSocket turns in flight."""
        async with httpx.AsyncClient(base_url=self.base, timeout=60) as client:
            self.tally.billable.discard("")
            jobs = [self._json(client, KEYS["noisy"]) for _ in range(10)]
            jobs += [self._ws(client, KEYS["noisy"], turns=1) for _ in range(10)]
            tasks = [asyncio.ensure_future(j) for j in jobs]
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            for outcome in await asyncio.gather(*tasks, return_exceptions=True):
                if isinstance(outcome, Exception):
                    self.tally.saw("shutdown_burst", f"transport {type(outcome).__name__}")


def steady_tenant(base: str, t0: float, end: float, max_requests: int, workers: int) -> Tally:
    """The well-behaved tenant, in a process of its own: `workers` agents, each continuing its
    conversation turn after turn until `end` (time.monotonic(), which every process shares).
    Returns what it saw, each request's (start, seconds) from `t0` under "steady"."""
    tally = Tally()
    latency = tally.latency_s.setdefault("steady", [])

    async def agent(client: httpx.AsyncClient, n: int) -> None:
        previous, turns = None, 0
        while time.monotonic() < end and sum(tally.requests.values()) < max_requests:
            body: dict[str, Any] = {"model": "m", "input": f"step {n}: read the next file and fix it"}
            if previous is not None and turns % 50:  # a new task every 50 turns
                body["previous_response_id"] = previous
            t = time.monotonic()
            try:
                r = await client.post("/v1/responses", json=body, headers=bearer(KEYS["steady"]))
            except httpx.HTTPError as exc:
                tally.saw("steady", f"transport {type(exc).__name__}")
                continue
            latency.append((t - t0, time.monotonic() - t))
            tally.saw("steady", outcome_of(r))
            previous = r.json()["id"] if r.status_code == 200 else None
            if previous:
                tally.billable.add(previous)
            turns += 1
            await asyncio.sleep(0.05)

    async def agents() -> None:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            await asyncio.gather(*(agent(client, n) for n in range(workers)))

    asyncio.run(agents())
    return tally


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {}
    q = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 else samples * 99
    return {"n": len(samples), "p50_ms": round(q[49] * 1000, 1), "p99_ms": round(q[98] * 1000, 1)}


def windows(samples: list[tuple[float, float]], start: float, width: float) -> list[dict[str, Any]]:
    """p50/p99 and the slowest of the samples taken in each `width` seconds from `start`."""
    by_window: dict[int, list[float]] = {}
    for at, s in samples:
        if at >= start:
            by_window.setdefault(int((at - start) // width), []).append(s)
    return [
        {"from_s": round(start + i * width, 1), **percentiles(v), "max_ms": round(max(v) * 1000, 1)}
        for i, v in sorted(by_window.items())
    ]


def slow_overlaps(
    samples: list[tuple[float, float]], spans: list[tuple[str, float, float]], start: float
) -> dict[str, Any]:
    """The requests slower than `SLOW_S` from `start`, and how many overlapped each kind of
    attack in flight (one request may overlap several; "none": it overlapped none)."""
    slow = [(at, s) for at, s in samples if at >= start and s > SLOW_S]
    overlapped: dict[str, int] = {}
    for at, s in slow:
        kinds = {name for name, a, b in spans if a < at + s and b > at} or {"none"}
        for kind in kinds:
            overlapped[kind] = overlapped.get(kind, 0) + 1
    return {"threshold_ms": SLOW_S * 1000, "n": len(slow), "overlapping": dict(sorted(overlapped.items()))}


def floor_slope(samples: list[tuple[float, float]], start: float, width: float = 30.0) -> float | None:
    """MB per minute by which the floor of RSS (the least of each `width` seconds from
    `start`) rose, by least squares: what the process keeps, apart from the large requests
    in flight when a sample fell (each holds ~100 MB for a moment). A window with under half
    the samples of the fullest (the last, cut short by the run's end) has no floor to
    speak of. None under three windows."""
    floors: dict[int, float] = {}
    counts: dict[int, int] = {}
    for at, mb in samples:
        if at >= start:
            i = int((at - start) // width)
            floors[i] = min(floors.get(i, mb), mb)
            counts[i] = counts.get(i, 0) + 1
    floors = {i: mb for i, mb in floors.items() if 2 * counts[i] >= max(counts.values())}
    if len(floors) < 3:
        return None
    fit = statistics.linear_regression([start + (i + 0.5) * width for i in floors], list(floors.values()))
    return round(fit.slope * 60, 2)


def stores_filled(
    state: Sequence[tuple[float, dict[str, float]]], after: float, share: float = 0.95
) -> float:
    """When the state stores first held `share` of the most they held together (not before
    `after`): on a slow machine they still fill long after the load's warm-up, and what
    they take is held on purpose, up to their bounds."""
    most = max((sum(held.values()) for _, held in state), default=0.0)
    return next((at for at, held in state if at >= after and sum(held.values()) >= share * most), after)


def rss_report(
    samples: list[tuple[float, float]],
    warm: float,
    state: Sequence[tuple[float, dict[str, float]]] = (),
    tail_s: float = 300.0,
) -> dict[str, Any]:
    """RSS after the load's warm-up: first, last, its spread ((max - min) / min) there and
    over the last `tail_s` seconds, and how fast its floor rose (`floor_slope`); and how fast
    it rose once the stores were full (`stores_filled`), by the least of each minute (a
    0.8 MB request every ten seconds, each held for seconds under load, can fill a 30 s
    window)."""

    def spread(values: list[float]) -> float | None:
        return round((max(values) - min(values)) / min(values), 4) if values else None

    after = [mb for at, mb in samples if at >= warm]
    full = stores_filled(state, warm)
    end = samples[-1][0] if samples else 0.0
    tail = [mb for at, mb in samples if at >= max(warm, end - tail_s)]
    return {
        "samples": samples,
        "after_warmup_first": after[0] if after else None,
        "after_warmup_last": after[-1] if after else None,
        "after_warmup_spread": spread(after),
        f"last_{tail_s:.0f}s_spread": spread(tail),
        "floor_mb_per_min": floor_slope(samples, warm),
        "stores_filled_s": full,
        "floor_mb_per_min_stores_filled": floor_slope(samples, full, width=60.0),
        "max": max((mb for _, mb in samples), default=None),
    }


def billing_report(folder: Path, billable: set[str]) -> dict[str, Any]:
    events = []
    for name in ("billing.jsonl", "spool.jsonl"):
        path = folder / name
        if path.exists():
            events += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    billed = [e["response_id"] for e in events if e.get("kind") == "billing"]
    counts: dict[str, int] = {}
    for rid in billed:
        counts[rid] = counts.get(rid, 0) + 1
    return {
        "responses_to_bill": len(billable),
        "billing_events": len(billed),
        "lost": len(billable - set(counts)),
        "doubled": sum(1 for n in counts.values() if n > 1),
        "billed_unseen_by_client": len(set(counts) - billable),
    }


def report(soak: Soak, folder: Path, exit_code: int | None) -> dict[str, Any]:
    warm = soak.warmup_s
    settled = warm + soak.load_warmup_s  # the load's warm-up over: stores at their bounds
    lat = soak.tally.latency_s
    steady = lat.get("steady", [])
    steady_warm = percentiles([s for at, s in steady if at < warm])
    steady_load = percentiles([s for at, s in steady if at >= warm])
    stored = b"".join(p.read_bytes() for p in folder.glob("recorded.db*"))
    return {
        "duration_s": round(time.monotonic() - soak.t0, 1),
        "warmup_s": warm,
        "load_warmup_s": soak.load_warmup_s,
        "requests": sum(soak.tally.requests.values()),
        "requests_by_kind": dict(sorted(soak.tally.requests.items())),
        "outcomes": dict(sorted(soak.tally.outcomes.items())),
        "billing": billing_report(folder, soak.tally.billable),
        "rss_mb": rss_report(soak.rss, settled, soak.state),
        "state_mb": soak.state,  # each store's bytes against --state-max-mb
        "latency": {
            "steady_unloaded": steady_warm,
            "steady_loaded": steady_load,
            "noisy_loaded": percentiles([s for at, s in lat.get("noisy", []) if at >= warm]),
            "steady_p99_ratio": round(steady_load["p99_ms"] / steady_warm["p99_ms"], 2)
            if steady_warm and steady_load
            else None,
            "steady_windows": windows(steady, warm, max(10.0, min(60.0, soak.load_warmup_s))),
            "steady_slow": slow_overlaps(steady, soak.tally.spans, warm),
        },
        "metrics_bytes_max": soak.tally.notes.get("metrics_bytes"),
        "secrets_in_store": [s for s in (AWS_KEY, CARD) if s.encode() in stored],
        "gateway_exit_code": exit_code,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds (at most 3600)")
    parser.add_argument("--max-requests", type=int, default=MAX_REQUESTS)
    parser.add_argument("--rate", type=float, default=2000.0, help="simulated model, tokens/s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--large-every", type=float, default=10.0, help="seconds between large requests (0: none)"
    )
    parser.add_argument(
        "--load-warmup", type=float, help="seconds of load before RSS is judged (default: a fifth)"
    )
    parser.add_argument("--out", type=Path, default=OUT / "soak.json")
    parser.add_argument("--gateway-log", type=Path, help="keep the gateway's log here")
    parser.add_argument(
        "--state-max-mb",
        type=int,
        default=2,
        help="the gateway's state_max_bytes, per store, and its item caches' bytes (MiB)",
    )
    args = parser.parse_args(argv)
    duration = min(max(args.duration, 1.0), MAX_DURATION_S)
    with tempfile.TemporaryDirectory(prefix="deltaguard-soak-") as tmp:
        folder = Path(tmp)
        proc, port = start_gateway(folder, args.rate, args.state_max_mb)
        soak = Soak(
            f"http://127.0.0.1:{port}",
            proc.pid,
            duration,
            min(args.max_requests, MAX_REQUESTS),
            args.seed,
            args.large_every,
            args.load_warmup,
        )
        try:
            asyncio.run(soak.run())
            asyncio.run(soak.shutdown_burst(proc))
            exit_code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        result = report(soak, folder, exit_code)
        if args.gateway_log:
            args.gateway_log.write_bytes((folder / "gateway.log").read_bytes())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k not in ("rss_mb", "state_mb")}, indent=2))
    print("rss_mb:", json.dumps({k: v for k, v in result["rss_mb"].items() if k != "samples"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

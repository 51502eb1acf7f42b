"""The hostile requests `eval/soak.py` mixes into its load: one coroutine per finding of
the second hardening round, each against the gateway the soak started on 127.0.0.1.

Each returns the outcome it saw (an HTTP status and error code, or a word) and adds the
response ids that must be billed to the tally; none of them is expected to crash the
gateway, leak a label or a secret, or lose a billing event.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
from dataclasses import dataclass, field
from typing import Any

import httpx
import websockets

AWS_KEY = "AKIAZ7QWERTYUIOPLKJH"  # shape-valid, not a real key
CARD = "4111 1111 1111 1111"


@dataclass
class Tally:
    """What the soak saw: requests and outcomes by kind, ids to bill, latencies per tenant."""

    requests: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)  # "kind status code" -> count
    billable: set[str] = field(default_factory=set)
    latency_s: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # tenant -> (at, s)
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # attack, from, to (soak time)
    notes: dict[str, Any] = field(default_factory=dict)

    def saw(self, kind: str, outcome: str) -> None:
        self.requests[kind] = self.requests.get(kind, 0) + 1
        key = f"{kind} {outcome}"
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    def absorb(self, other: Tally) -> None:
        """Count what `other` (another client process's tally) saw as seen here too."""
        for kind, n in other.requests.items():
            self.requests[kind] = self.requests.get(kind, 0) + n
        for key, n in other.outcomes.items():
            self.outcomes[key] = self.outcomes.get(key, 0) + n
        self.billable |= other.billable
        for tenant, samples in other.latency_s.items():
            self.latency_s.setdefault(tenant, []).extend(samples)


def outcome_of(r: httpx.Response) -> str:
    try:
        code = (r.json().get("error") or {}).get("code") or "ok"
    except ValueError:
        code = "-"
    return f"{r.status_code} {code}"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def big_type_names(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    name = "".join(rng.choices(string.ascii_letters, k=100_000))
    body = {"model": "m", "input": [{"type": name, "text": "tool text"}]}
    r = await client.post("/v1/responses", json=body, headers=bearer(key))
    if r.status_code == 200:
        tally.billable.add(r.json()["id"])
    tally.saw("attack:type_names", outcome_of(r))


async def large_request(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    text = " ".join(f"w{rng.randrange(10**6)} lorem ipsum dolor" for _ in range(30_000))  # ~0.8 MB
    r = await client.post("/v1/responses", json={"model": "m", "input": text}, headers=bearer(key))
    if r.status_code == 200:
        tally.billable.add(r.json()["id"])
    tally.saw("attack:large", outcome_of(r))


async def deep_nesting(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    # Written as text: a JSON encoder recurses once per level, and 950 levels inside the
    # test runner's own frames can exceed Python's recursion limit before anything is sent.
    depth = rng.choice((200, 600, 950))
    deep = '{"k":' * depth + '"x"' + "}" * depth
    body = '{"model": "m", "input": [{"type": "custom_thing", "data": ' + deep + "}]}"
    headers = {**bearer(key), "content-type": "application/json"}
    r = await client.post("/v1/responses", content=body.encode(), headers=headers)
    tally.saw("attack:deep", outcome_of(r))


async def bad_usage(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    usage = rng.choice(({"prompt_tokens": -1}, {"prompt_tokens": 10**30}, {"prompt_tokens": "12"}))
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "message": {"role": "assistant", "content": "ok"},
    }
    r = await client.post("/v1/guard/output", json={**body, "usage": usage}, headers=bearer(key))
    tally.saw("attack:usage", outcome_of(r))


async def cross_site(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    body = {"model": "m", "input": "hi"}
    r = await client.post(
        "/v1/responses", json=body, headers={**bearer(key), "Origin": "https://evil.example"}
    )
    tally.saw("attack:origin", outcome_of(r))
    r = await client.post("/v1/responses", json=body, headers={**bearer(key), "Host": "evil.example"})
    tally.saw("attack:host", outcome_of(r))
    url = str(client.base_url).replace("http://", "ws://") + "/v1/responses"
    try:
        async with websockets.connect(
            url, additional_headers={**bearer(key), "Origin": "https://evil.example"}
        ):
            tally.saw("attack:ws_origin", "open")
    except websockets.InvalidStatus as exc:
        tally.saw("attack:ws_origin", str(exc.response.status_code))


async def secret_metadata(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    """Secrets where nothing scores them, in a turn that is flagged (and so recorded)."""
    items = [
        {"role": "user", "content": "hello", "metadata": {"note": f"key {AWS_KEY}", f"card {CARD}": 1}},
        {"type": "mystery_result", "data": {f"card {CARD}": f"use {AWS_KEY}"}},
    ]
    r = await client.post("/v1/responses", json={"model": "m", "input": items}, headers=bearer(key))
    tally.saw("attack:secrets", outcome_of(r))


async def sse_disconnect(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    body = {"model": "m", "input": "tell me a long story", "stream": True}
    async with client.stream("POST", "/v1/responses", json=body, headers=bearer(key)) as r:
        deltas = 0
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.created":
                tally.billable.add(event["response"]["id"])
            deltas += event["type"] == "response.output_text.delta"
            if deltas >= rng.randrange(1, 8) or event["type"] == "response.completed":
                break
    tally.saw("attack:sse_disconnect", "left")


async def ws_disconnect(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    url = str(client.base_url).replace("http://", "ws://") + "/v1/responses"
    async with websockets.connect(url, additional_headers=bearer(key)) as ws:
        await ws.send(json.dumps({"type": "response.create", "model": "m", "input": "a long story"}))
        deltas = 0
        while deltas < rng.randrange(1, 8):
            event = json.loads(await ws.recv())
            if event["type"] == "response.created":
                tally.billable.add(event["response"]["id"])
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
            deltas += event["type"] == "response.output_text.delta"
    tally.saw("attack:ws_disconnect", "left")


async def slow_headers(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    """Fifty connections trickling their headers: each must be dropped, not held."""
    host, port = str(client.base_url).removeprefix("http://").split(":")

    async def trickle() -> str:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            head = b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200
            for byte in head:
                writer.write(bytes([byte]))
                await writer.drain()
                try:
                    if await asyncio.wait_for(reader.read(1), 0.2) == b"":
                        return "dropped"
                except TimeoutError:
                    continue
            return "held"
        except (ConnectionError, OSError):
            return "dropped"
        finally:
            writer.close()

    for outcome in await asyncio.gather(*(trickle() for _ in range(50))):
        tally.saw("attack:slow_headers", outcome)


async def metrics_scrape(client: httpx.AsyncClient, key: str, tally: Tally, rng: random.Random) -> None:
    tally.saw("attack:metrics_anonymous", outcome_of(await client.get("/metrics")))
    r = await client.get("/metrics", headers=bearer(key))
    tally.saw("metrics", str(r.status_code))
    tally.notes["metrics_bytes"] = max(tally.notes.get("metrics_bytes", 0), len(r.content))


ATTACKS = (
    big_type_names,
    deep_nesting,
    bad_usage,
    cross_site,
    secret_metadata,
    sse_disconnect,
    ws_disconnect,
    metrics_scrape,
)

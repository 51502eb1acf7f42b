"""Chat Completions upstreams: the simulated chat model, and any `/chat/completions` endpoint.

A chat upstream answers a request body exactly as the client sent it (the gateway
forwards every field): `complete(body)` returns the `chat.completion` object,
`stream(body)` yields the `chat.completion.chunk` objects in the order the model sent
them. A model's refusal of the request (HTTP 4xx) is `UpstreamRefused`, carried to the
client with its status and error body; anything else that fails is `UpstreamError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any, Protocol

import httpx

from deltaguard.errors import ItemError, UpstreamError
from deltaguard.gateway.upstream import _http_errors, _sse_events
from deltaguard.integrations.chat_items import chat_history_items
from deltaguard.state.scoring import chain_of


class UpstreamRefused(UpstreamError):
    """The upstream answered 4xx: the client's request is at fault, so it sees the model's error."""

    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"upstream answered {status}")
        self.status = status
        self.body = body if isinstance(body, dict) and "error" in body else {"error": {"message": str(body)}}


class ChatUpstream(Protocol):
    async def complete(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]: ...

    async def aclose(self) -> None: ...


# -- the simulated chat model ----------------------------------------------------------

_WORDS = (
    "the fix is to retry the request after the timeout and keep the cache warm so that the next "
    "call finds the session token before it expires which makes the failing test pass again"
).split()


class SimulatedChatModel:
    """A deterministic chat model that streams at `tokens_per_s` and acts like a coding agent.

    Like `SimulatedModel`: with function tools in the request it calls the first one
    `tool_calls` times after each user message, then answers in `reply_tokens` words;
    everything it says is a function of the messages. Its usage counts a prompt-cache
    hit for the longest prefix of messages it has already answered.
    """

    def __init__(self, tokens_per_s: float = 1000.0, reply_tokens: int = 40, tool_calls: int = 3) -> None:
        self.tokens_per_s = tokens_per_s
        self.reply_tokens = reply_tokens
        self.tool_calls = tool_calls
        self._cached: OrderedDict[bytes, None] = OrderedDict()  # history chains it has read

    def _answer(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the assistant message, usage) for a request."""
        messages = body.get("messages") or []
        try:
            items = chat_history_items(messages)
        except ItemError as exc:
            raise UpstreamRefused(400, {"error": {"message": str(exc), "code": "invalid_value"}}) from None
        chains = chain_of(items)
        hit = next((k for k in range(len(chains), 0, -1) if chains[k - 1] in self._cached), 0)
        for chain in chains:
            self._cached[chain] = None
        while len(self._cached) > 100_000:
            self._cached.popitem(last=False)
        prompt = sum(i.tokens for i in items)
        cached = sum(i.tokens for i in items[:hit])
        seed = hashlib.sha256(
            json.dumps(messages[-4:], sort_keys=True).encode() + str(len(messages)).encode()
        )
        rng = random.Random(seed.digest())
        since_user = 0
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user":
                break
            since_user += isinstance(m, dict) and m.get("role") == "tool"
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
        name = (tools[0].get("function") or {}).get("name") if tools else None
        if name and since_user < self.tool_calls:
            args = json.dumps({"path": f"src/{rng.choice(_WORDS)}_{since_user}.py"})
            call = {"id": f"call_{seed.hexdigest()[:24]}", "type": "function"}
            call["function"] = {"name": name, "arguments": args}
            message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
            completion = max(1, len(args) // 4)
        else:
            text = " ".join(rng.choice(_WORDS) for _ in range(self.reply_tokens))
            message = {"role": "assistant", "content": text, "refusal": None}
            completion = self.reply_tokens
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
        return message, usage

    def _envelope(self, body: dict[str, Any], kind: str, completion_id: str, created: int) -> dict[str, Any]:
        model = body.get("model") if isinstance(body.get("model"), str) else "deltaguard-sim"
        return {"id": completion_id, "object": kind, "created": created, "model": model}

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        message, usage = self._answer(body)
        await asyncio.sleep(usage["completion_tokens"] / self.tokens_per_s)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        out = self._envelope(body, "chat.completion", f"chatcmpl-{uuid.uuid4().hex}", int(time.time()))
        out["choices"] = [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]
        out.update(usage=usage, system_fingerprint="fp_deltaguard_sim")
        return out

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        message, usage = self._answer(body)
        base = self._envelope(body, "chat.completion.chunk", f"chatcmpl-{uuid.uuid4().hex}", int(time.time()))
        base["system_fingerprint"] = "fp_deltaguard_sim"
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and options.get("include_usage") is True

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            out = {
                **base,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            }
            if with_usage:
                out["usage"] = None  # as the hosted API marks every chunk but the last
            return out

        start = time.monotonic()
        calls = message.get("tool_calls")
        if calls:
            fn = calls[0]["function"]
            head = {"index": 0, "id": calls[0]["id"], "type": "function"}
            head["function"] = {"name": fn["name"], "arguments": ""}
            yield chunk({"role": "assistant", "content": None, "tool_calls": [head], "refusal": None})
            await asyncio.sleep(usage["completion_tokens"] / self.tokens_per_s)
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": fn["arguments"]}}]})
            yield chunk({}, "tool_calls")
        else:
            yield chunk({"role": "assistant", "content": "", "refusal": None})
            words = str(message["content"]).split(" ")
            for i in range(0, len(words), 4):
                delay = start + (i + 4) / self.tokens_per_s - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                yield chunk({"content": ("" if i == 0 else " ") + " ".join(words[i : i + 4])})
            yield chunk({}, "stop")
        if with_usage:
            yield {**base, "choices": [], "usage": usage}

    async def aclose(self) -> None:
        return None


# -- HTTP ------------------------------------------------------------------------------


def _error_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]


class HttpChatUpstream:
    """Forwards to `{base_url}/chat/completions` over HTTP, the body as the client sent it."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 120.0) -> None:
        self.url = f"{base_url.rstrip('/')}/chat/completions"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s, connect=10.0))

    def _raise_for(self, resp: httpx.Response, raw: bytes) -> None:
        if 400 <= resp.status_code < 500:
            raise UpstreamRefused(resp.status_code, _error_body(raw))
        if resp.status_code >= 500:
            raise UpstreamError(
                f"upstream answered {resp.status_code}: {raw[:500].decode('utf-8', 'replace')}"
            )

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        with _http_errors("upstream request"):
            resp = await self._client.post(self.url, json=body)
            raw = await resp.aread()
        self._raise_for(resp, raw)
        try:
            out = json.loads(raw)
        except ValueError as exc:
            raise UpstreamError(f"upstream sent invalid JSON: {raw[:200]!r}") from exc
        if not isinstance(out, dict):
            raise UpstreamError("upstream answer is not a JSON object")
        return out

    async def stream(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        with _http_errors("upstream request"):
            async with self._client.stream("POST", self.url, json=body) as resp:
                if resp.status_code >= 400:
                    self._raise_for(resp, await resp.aread())
                async for chunk in _sse_events(resp):
                    if isinstance(chunk, dict) and "error" in chunk and "choices" not in chunk:
                        message = (chunk.get("error") or {}).get("message", "the model failed")
                        raise UpstreamError(f"upstream failed mid-stream: {message}")
                    yield chunk

    async def aclose(self) -> None:
        await self._client.aclose()

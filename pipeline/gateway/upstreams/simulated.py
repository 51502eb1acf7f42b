"""The embedded simulated models, one per protocol: deterministic coding agents.

Both stream at a set number of tokens per second and, with function tools in the
request, call the first one a few times after each user message (reading a file of the
repository) before answering like a coding agent (`agent_text`: what it read, found and
changed); everything they say is a function of the history, so tests and benchmarks repeat.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any

from deltaguard.chat_items import chat_history_items
from deltaguard.errors import ItemError
from deltaguard.gateway.upstreams.agent_text import read_paths, reply, tool_arguments
from deltaguard.gateway.upstreams.chat import UpstreamRefused
from deltaguard.gateway.upstreams.responses import UpstreamCall
from deltaguard.gateway.wire import new_id, response_object
from deltaguard.parsing import parse_items
from deltaguard.state.scoring import chain_of
from deltaguard.usage import Usage, usage_object


class SimulatedModel:
    """A deterministic model that streams at `tokens_per_s` and acts like a coding agent.

    With tools in the request, it calls the first function tool `tool_calls` times after
    each user message (the client answers with function_call_output items), then gives a
    final answer of `reply_tokens` tokens. Everything it says is a function of the history.
    `prefill_s_per_token` adds the cost of reading each input token the model has not
    seen before (the history after `parent` only, as a model with a prompt cache does).
    """

    def __init__(
        self,
        tokens_per_s: float = 1000.0,
        reply_tokens: int = 40,
        tool_calls: int = 3,
        prefill_s_per_token: float = 0.0,
    ) -> None:
        self.tokens_per_s = tokens_per_s
        self.reply_tokens = reply_tokens
        self.tool_calls = tool_calls
        self.prefill_s_per_token = prefill_s_per_token
        self._seen: OrderedDict[str, None] = OrderedDict()  # response ids it produced

    async def _pace(self, start: float, tokens_so_far: int) -> None:
        due = start + tokens_so_far / self.tokens_per_s
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        # It runs on the event loop: given the gateway's parsed items, it parses nothing
        # (a resent history, or a 0.8 MB message, held the loop ~50 ms).
        history = call.history_items
        if history is None or len(history) != len(call.history):
            history = parse_items(list(call.history), "input")
        fresh = len(call.new_items) if call.parent in self._seen else len(history)
        input_tokens = sum(i.tokens for i in history)
        cached = input_tokens - sum(i.tokens for i in history[len(history) - fresh :])
        response_id = new_id("resp")
        created_at = int(time.time())
        seq = 0

        def event(kind: str, **fields: Any) -> dict[str, Any]:
            nonlocal seq
            seq += 1
            return {"type": kind, "sequence_number": seq - 1, **fields}

        def response(status: str, output: list[dict[str, Any]], usage: Any = None) -> dict[str, Any]:
            body = {**call.body, "tools": call.body.get("tools") or []}
            return response_object(
                response_id, body, status=status, output=output, usage=usage, created_at=created_at
            )

        yield event("response.created", response=response("in_progress", []))
        yield event("response.in_progress", response=response("in_progress", []))
        if self.prefill_s_per_token:
            await asyncio.sleep(self.prefill_s_per_token * (input_tokens - cached))
        output: list[dict[str, Any]] = []
        output_tokens = 0
        if call.generate:
            start = time.monotonic()
            async for ev, count in self._answer(call, history, start, event):
                if ev["type"] == "response.output_item.done":
                    output.append(ev["item"])
                output_tokens += count
                yield ev
        usage = usage_object(Usage(input_tokens, cached, output_tokens))
        self._seen[response_id] = None
        while len(self._seen) > 10_000:
            self._seen.popitem(last=False)
        yield event("response.completed", response=response("completed", output, usage))

    async def _answer(
        self, call: UpstreamCall, history: Sequence[Any], start: float, event: Any
    ) -> AsyncIterator[tuple[dict[str, Any], int]]:
        """(event, output tokens it completes): a function call, or a streamed answer."""
        seed = hashlib.sha256(b"".join(i.digest for i in history[-4:]) + str(len(history)).encode()).digest()
        rng = random.Random(seed)
        calls_since_user = 0
        asked, arguments = "", []
        for item in reversed(history):
            if item.kind == "message" and item.role == "user":
                asked = item.text
                break
            calls_since_user += item.kind == "function_call_output"
            if item.kind == "function_call":
                arguments.insert(0, str(item.raw.get("arguments", "")))
        tool = next((t for t in call.tools or [] if t.get("type") == "function" and t.get("name")), None)
        if tool is not None and calls_since_user < self.tool_calls:
            args = tool_arguments(rng, read_paths(arguments))
            tokens = max(1, len(args) // 4)
            await self._pace(start, tokens)
            call_id, name = new_id("call"), str(tool["name"])  # unique, as a real model's are
            item = {"id": new_id("fc"), "type": "function_call", "status": "completed", "arguments": args}
            item.update(call_id=call_id, name=name)
            at = {"item_id": item["id"], "output_index": 0}
            added = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=0, item=added), 0
            yield event("response.function_call_arguments.delta", **at, delta=args), 0
            yield event("response.function_call_arguments.done", **at, name=name, arguments=args), 0
            yield event("response.output_item.done", output_index=0, item=item), tokens
            return
        words = reply(rng, self.reply_tokens, asked, read_paths(arguments)).split(" ")
        added = {"id": new_id("msg"), "type": "message", "role": "assistant", "status": "in_progress"}
        added["content"] = []
        at = {"item_id": added["id"], "output_index": 0, "content_index": 0}
        yield event("response.output_item.added", output_index=0, item=added), 0
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", **at, part=part), 0
        chunk = 4
        text = ""
        for i in range(0, len(words), chunk):
            await self._pace(start, i + chunk)
            delta = ("" if i == 0 else " ") + " ".join(words[i : i + chunk])
            text += delta
            yield event("response.output_text.delta", **at, delta=delta, logprobs=[]), 0
        yield event("response.output_text.done", **at, text=text, logprobs=[]), 0
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        yield event("response.content_part.done", **at, part=part), 0
        item = {**added, "status": "completed", "content": [part]}
        yield event("response.output_item.done", output_index=0, item=item), len(words)

    async def aclose(self) -> None:
        return None


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
        asked, arguments = "", []
        for m in reversed(messages):
            if isinstance(m, dict) and m.get("role") == "user":
                asked = m.get("content") if isinstance(m.get("content"), str) else ""
                break
            since_user += isinstance(m, dict) and m.get("role") == "tool"
            for c in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
                fn = c.get("function") if isinstance(c, dict) else None
                arguments.insert(0, str(fn.get("arguments", "")) if isinstance(fn, dict) else "")
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function"]
        name = (tools[0].get("function") or {}).get("name") if tools else None
        if name and since_user < self.tool_calls:
            args = tool_arguments(rng, read_paths(arguments))
            call = {"id": f"call_{seed.hexdigest()[:24]}", "type": "function"}
            call["function"] = {"name": name, "arguments": args}
            message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
            completion = max(1, len(args) // 4)
        else:
            text = reply(rng, self.reply_tokens, asked, read_paths(arguments))
            message = {"role": "assistant", "content": text, "refusal": None}
            completion = self.reply_tokens
        usage = usage_object(Usage(prompt, cached, completion), "chat")
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

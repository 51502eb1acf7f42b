"""A Chat Completions upstream on 127.0.0.1 that records what it is sent and what it sends.

    with running_chat_upstream() as upstream:
        GatewayConfig(upstream=upstream.base_url, upstream_mode="http")
        ...
        upstream.requests[-1]["body"]       # the body exactly as the gateway forwarded it
        upstream.sent[-1]                   # the completion or the chunks exactly as sent

`POST /v1/chat/completions`, JSON or SSE (`stream: true`, with the usage chunk when
`stream_options.include_usage`). What it answers is a script: `(body) -> Answer`; the
default calls the first function tool once after each user message, then answers in
text. Every answer carries fields a gateway might drop (`system_fingerprint`,
`service_tier`, `logprobs`, a vendor field on the object, the choice and the delta) so
that tests can check they all arrive. `Answer.status` refuses the request with that
status; `Answer.fail_after` breaks the stream after that many content chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from deltaguard.gateway.server import free_port


@dataclass
class Answer:
    text: str | None = None
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments)
    status: int | None = None  # refuse with this HTTP status
    fail_after: int | None = None  # end the stream abruptly after this many content chunks
    usage: tuple[int, int, int, int] = (21, 7, 9, 3)  # prompt, cached, completion, reasoning


Script = Callable[[dict[str, Any]], Answer]


def agent_script(body: dict[str, Any]) -> Answer:
    """One call of the first function tool after each user message, then a text answer."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    tools = [t for t in body.get("tools") or [] if t.get("type") == "function"]
    if tools and last.get("role") == "user":
        return Answer(tool_calls=[(tools[0]["function"]["name"], json.dumps({"path": "src/app.py"}))])
    return Answer(text="The failing test is fixed: retry after the timeout.")


def _usage(answer: Answer) -> dict[str, Any]:
    prompt, cached, completion, reasoning = answer.usage
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": reasoning, "accepted_prediction_tokens": 0},
    }


class ChatUpstreamServer:
    def __init__(self, script: Script = agent_script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []  # {"body", "headers"}
        self.sent: list[Any] = []  # a completion object, or the list of chunks of a stream
        self.base_url = ""

    def _head(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:20]}",
            "object": kind,
            "created": int(time.time()),
            "model": body.get("model", "m"),
            "system_fingerprint": "fp_test_7",
            "service_tier": "default",
            "x_vendor": {"region": "test-1"},
        }

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append({"body": body, "headers": dict(request.headers)})
        answer = self.script(body)
        if answer.status is not None:
            error = {"message": "the model refused this request", "type": "invalid_request_error"}
            error.update(code="model_refused", param=None)
            return JSONResponse({"error": error}, status_code=answer.status)
        if not body.get("stream"):
            return JSONResponse(self._completion(body, answer))
        chunks = self._chunks(body, answer)
        self.sent.append(chunks)

        async def events() -> Any:
            for i, chunk in enumerate(chunks):
                if answer.fail_after is not None and i == answer.fail_after + 1:
                    return  # the connection ends without a finish_reason or [DONE]
                await asyncio.sleep(0)
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def _completion(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
        message["annotations"] = []
        if answer.tool_calls:
            message["tool_calls"] = [
                {"id": f"call_{i}_{uuid.uuid4().hex[:8]}", "type": "function"}
                | {"function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(answer.tool_calls)
            ]
        finish = "tool_calls" if answer.tool_calls else "stop"
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        choice["x_choice_note"] = "kept"
        out = {**self._head(body, "chat.completion"), "choices": [choice], "usage": _usage(answer)}
        self.sent.append(out)
        return out

    def _chunks(self, body: dict[str, Any], answer: Answer) -> list[dict[str, Any]]:
        head = self._head(body, "chat.completion.chunk")
        with_usage = (body.get("stream_options") or {}).get("include_usage") is True

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            out = {**head, "choices": [choice]}
            if with_usage:
                out["usage"] = None
            return out

        chunks = [chunk({"role": "assistant", "content": "", "refusal": None, "x_delta_note": "kept"})]
        if answer.tool_calls:
            for i, (name, args) in enumerate(answer.tool_calls):
                call = {"index": i, "id": f"call_{i}_{uuid.uuid4().hex[:8]}", "type": "function"}
                chunks.append(chunk({"tool_calls": [{**call, "function": {"name": name, "arguments": ""}}]}))
                for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                    chunks.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
            chunks.append(chunk({}, "tool_calls"))
        else:
            words = (answer.text or "").split(" ")
            for i, word in enumerate(words):
                chunks.append(chunk({"content": word if i == 0 else " " + word}))
            chunks.append(chunk({}, "stop"))
        if with_usage:
            chunks.append({**head, "choices": [], "usage": _usage(answer)})
        return chunks


@contextlib.contextmanager
def running_chat_upstream(script: Script = agent_script) -> Iterator[ChatUpstreamServer]:
    """The server on a free 127.0.0.1 port, in a background thread; `base_url` ends in /v1."""
    upstream = ChatUpstreamServer(script)
    port = free_port()
    app = Starlette(routes=[Route("/v1/chat/completions", upstream.chat, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("chat upstream did not start")
        time.sleep(0.01)
    upstream.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield upstream
    finally:
        server.should_exit = True
        thread.join(10)

"""Small scripted upstreams for gateway tests: they stream real Responses API events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from deltaguard.errors import UpstreamError
from deltaguard.gateway.upstreams import UpstreamCall
from deltaguard.gateway.wire import new_id, response_object
from deltaguard.usage import Usage, usage_object


def _event(kind: str, seq: int, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "sequence_number": seq, **fields}


async def message_events(
    call: UpstreamCall, deltas: Sequence[str], fail_after: int | None = None, pause_s: float = 0.0
) -> AsyncIterator[dict[str, Any]]:
    """A response whose one message streams `deltas`; `UpstreamError` before delta `fail_after`."""
    response_id, msg_id = new_id("resp"), new_id("msg")
    yield _event(
        "response.created",
        0,
        response=response_object(response_id, call.body, status="in_progress", output=[]),
    )
    added = {"id": msg_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    yield _event("response.output_item.added", 1, output_index=0, item=added)
    seq = 2
    for i, delta in enumerate(deltas):
        if fail_after is not None and i == fail_after:
            raise UpstreamError("upstream connection reset")
        if pause_s:
            await asyncio.sleep(pause_s)
        yield _event(
            "response.output_text.delta", seq, item_id=msg_id, output_index=0, content_index=0, delta=delta
        )
        seq += 1
    text = "".join(deltas)
    item = {
        **added,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    yield _event("response.output_item.done", seq, output_index=0, item=item)
    usage = usage_object(Usage(5, 0, len(deltas)))
    done = response_object(response_id, call.body, status="completed", output=[item], usage=usage)
    yield _event("response.completed", seq + 1, response=done)


class ScriptedUpstream:
    """Streams the given text deltas as one message, then fails if told to."""

    def __init__(self, deltas: Sequence[str], fail_after: int | None = None) -> None:
        self.deltas = deltas
        self.fail_after = fail_after

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        return message_events(call, self.deltas, self.fail_after)

    async def aclose(self) -> None:
        return None


class StallingUpstream:
    """Sends one delta, then nothing for `pause_s`."""

    def __init__(self, pause_s: float = 30.0) -> None:
        self.pause_s = pause_s

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        events = message_events(call, ["thinking", " more"])
        for _ in range(3):  # created, item added, the first delta
            yield await anext(events)
        await asyncio.sleep(self.pause_s)
        async for event in events:
            yield event

    async def aclose(self) -> None:
        return None


class SlowUpstream:
    """Waits `delay_s` before answering (an overloaded or slow model)."""

    def __init__(self, delay_s: float = 1.0) -> None:
        self.delay_s = delay_s

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        await asyncio.sleep(self.delay_s)
        async for event in message_events(call, ["ok"]):
            yield event

    async def aclose(self) -> None:
        return None


class RecordingUpstream:
    """The simulated model, recording every call the gateway makes to it."""

    def __init__(self, **sim: Any) -> None:
        from deltaguard.gateway.upstreams import SimulatedModel

        self.model = SimulatedModel(**sim)
        self.calls: list[UpstreamCall] = []

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        self.calls.append(call)
        return self.model.stream(call)

    async def aclose(self) -> None:
        return None


class ToolCallingUpstream:
    """An agent's model: to every turn it says a few words, then calls `tool`, after
    `first_action_s`. It counts the generations closed before they completed (`cancelled`).
    `arguments` may be a function of the call (what a model makes of what it was sent)."""

    def __init__(
        self,
        tool: str = "run",
        arguments: str | Callable[[UpstreamCall], str] = '{"cmd": "ls"}',
        first_action_s: float = 0.0,
    ) -> None:
        self.tool = tool
        self.arguments = arguments
        self.first_action_s = first_action_s
        self.cancelled = 0
        self.completed = 0

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        done = False
        try:
            events = message_events(call, ["Reading", " the output."])
            text: list[dict[str, Any]] = []
            async for event in events:
                if event["type"] == "response.completed":
                    break
                text.append(event)
                yield event
            message = text[-1]["item"]
            await asyncio.sleep(self.first_action_s)
            arguments = self.arguments(call) if callable(self.arguments) else self.arguments
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "completed",
                "call_id": new_id("call"),
            }
            item.update(name=self.tool, arguments=arguments)
            seq = text[-1]["sequence_number"] + 1
            added = {**item, "status": "in_progress", "arguments": ""}
            yield _event("response.output_item.added", seq, output_index=1, item=added)
            at = {"item_id": item["id"], "output_index": 1}
            yield _event("response.function_call_arguments.delta", seq + 1, **at, delta=arguments)
            yield _event("response.function_call_arguments.done", seq + 2, **at, arguments=arguments)
            yield _event("response.output_item.done", seq + 3, output_index=1, item=item)
            usage = usage_object(Usage(11, 0, 7))
            response = response_object(
                text[0]["response"]["id"], call.body, status="completed", output=[message, item], usage=usage
            )
            done = True
            self.completed += 1
            yield _event("response.completed", seq + 4, response=response)
        finally:
            self.cancelled += not done

    async def aclose(self) -> None:
        return None

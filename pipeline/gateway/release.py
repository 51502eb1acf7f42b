"""Verdict before release: the model's actions wait for the monitor lane's verdict.

When a turn carries untrusted input (a tool output, an attached file) that the monitor
lane judges beside inference, the model may already be acting on an injection in it. Its
text may stream meanwhile, but an actionable output item (a function or custom tool
call, a shell or apply-patch call, a computer action, an MCP call or approval request)
reaches the client only once the turn's verdict is in: a client executes those. From the
first held event on, every later event waits too, so the stream keeps its order; the
terminal event always waits (its response carries the output). `ReleaseHold.mode`:
"actions" (the default), "all" (nothing but the response's creation streams before the
verdict), "off" (release at once; a flag blocks the next turn, as before).

A block ends the stream with `MonitorBlocked`, and the caller closes the upstream's
stream, which cancels the generation. The added latency is about
max(0, monitor time - the model's time to its first held event); `eval/bench_hold.py`
measures it.

    hold = ReleaseHold("actions", timeout_s=30.0)
    async for event in hold.stream(upstream_events, turn.monitor_verdict):
        ...   # raises MonitorBlocked(categories) when the verdict blocks

A blocking verdict is seen at the next event the upstream sends, or at once while an
event is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Literal

from deltaguard.classifiers.actions import ACTIONABLE_TYPES
from deltaguard.errors import SafetyBlocked

log = logging.getLogger("deltaguard.gateway")

HoldMode = Literal["actions", "all", "off"]

# Events that never wait: the response's creation and progress carry no output.
_NEVER_HELD = frozenset({"response.created", "response.queued", "response.in_progress"})
# Events that always wait: the end of the response carries its whole output.
_ALWAYS_HELD = frozenset({"response.completed", "response.incomplete", "response.failed"})


class MonitorBlocked(SafetyBlocked):
    """The monitor lane's verdict on the turn's untrusted input blocks it, mid-response."""


class ReleaseHold:
    """Which of a response's events wait for the turn's monitor verdict, and for how long.

    `timeout_s`: the longest wait; past it the events are released (logged): a stalled
    monitor lane must not stall every agent, and its flag still blocks the next turn."""

    def __init__(self, mode: HoldMode = "actions", timeout_s: float = 30.0, *, chat: bool = False) -> None:
        """`chat`: the events are Chat Completions chunks (a tool call is a delta's
        `tool_calls`; the end is a `finish_reason`, or the usage chunk)."""
        self.mode = mode
        self.timeout_s = timeout_s
        self.chat = chat

    async def judge(self, verdict: Callable[[], Awaitable[list[str]]]) -> list[str]:
        """The verdict's block categories, or [] past the timeout (logged: released)."""
        try:
            return await asyncio.wait_for(verdict(), self.timeout_s)
        except TimeoutError:
            log.warning("no monitor verdict in %g s: output released", self.timeout_s)
            return []

    def holds(self, event: dict[str, Any]) -> bool:
        if self.chat:
            return self._holds_chunk(event)
        kind = str(event.get("type", ""))
        if kind in _NEVER_HELD:
            return False
        if kind in _ALWAYS_HELD or self.mode == "all":
            return True
        item = event.get("item")
        # An actionable item's events: its `added` / `done` carry the item; its deltas
        # (`response.function_call_arguments.delta`, ...) follow its `added`.
        return isinstance(item, dict) and item.get("type") in ACTIONABLE_TYPES

    def _holds_chunk(self, chunk: dict[str, Any]) -> bool:
        if self.mode == "all" or (chunk.get("usage") and not chunk.get("choices")):
            return True
        for choice in chunk.get("choices") or []:
            delta = (choice.get("delta") or {}) if isinstance(choice, dict) else {}
            if not isinstance(delta, dict):
                continue
            if (
                choice.get("finish_reason") is not None
                or delta.get("tool_calls")
                or delta.get("function_call")
            ):
                return True
        return False

    async def stream(
        self, events: AsyncIterator[dict[str, Any]], verdict: Callable[[], Awaitable[list[str]]]
    ) -> AsyncIterator[dict[str, Any]]:
        """`events`, each released when the hold allows; `verdict()` gives the block
        categories ([]: release). Raises `MonitorBlocked` at the first event after a
        blocking verdict (the caller then closes `events`, cancelling the generation).
        The upstream is read in the caller's task: its streams are not task-safe."""
        if self.mode == "off":
            async for event in events:
                yield event
            return
        judged: asyncio.Future[list[str]] = asyncio.ensure_future(verdict())
        holding = False
        timed_out = False
        try:
            async for event in events:
                if timed_out:
                    yield event
                    continue
                if judged.done():
                    _raise_if_blocked(judged)
                    yield event
                    continue
                holding = holding or self.holds(event)
                if holding:
                    try:
                        await asyncio.wait_for(asyncio.shield(judged), self.timeout_s)
                    except TimeoutError:
                        log.warning("no monitor verdict in %g s: output released", self.timeout_s)
                        timed_out = True
                    else:
                        _raise_if_blocked(judged)
                yield event
        finally:
            if not judged.done():
                judged.cancel()
            aclose = getattr(events, "aclose", None)
            if aclose is not None:  # a block: the upstream's stream is closed, cancelling it
                await aclose()


def _raise_if_blocked(judged: asyncio.Future[list[str]]) -> None:
    if judged.exception() is not None:
        log.error("the monitor verdict failed: releasing the model's output", exc_info=judged.exception())
        return
    categories = judged.result()
    if categories:
        raise MonitorBlocked(categories)

"""Verdict before release: the model's actions wait for the monitor lane's verdict, and
each is checked against where its strings came from.

When a turn carries untrusted input (a tool output, an attached file) that the monitor
lane judges beside inference, the model may already be acting on an injection in it. Its
text may stream meanwhile, but an actionable output item (a function or custom tool
call, a shell or apply-patch call, a computer action, an MCP call or approval request)
reaches the client only once the turn's verdict is in: a client executes those. From the
first held event on, every later event waits too, so the stream keeps its order; the
terminal event always waits (its response carries the output). `ReleaseHold.mode`:
"actions" (the default), "all" (nothing but the response's creation streams before the
verdict), "off" (release at once; a flag blocks the next turn, as before).

The action check (`deltaguard.lanes.provenance`, whatever the mode and whether or not the
turn carries untrusted input: an injection read turns ago acts now) judges each
actionable item once it is complete (its `output_item.done`; in a chat stream, at the
`finish_reason`): from an action's first event until it is judged, it and every later
event wait. An action that used strings untrusted content told the model to use ends the
stream with `ActionBlocked` (policy "block"; "flag" releases it with a flag event).

A block ends the stream with `MonitorBlocked` (or its `ActionBlocked`), and the caller
closes the upstream's stream, which cancels the generation. The added latency is about
max(0, monitor time - the model's time to its first held event); `eval/bench_hold.py`
measures it.

    hold = release_hold(config, stage, turn)       # None: nothing to hold or check
    async for event in hold.stream(upstream_events, turn.monitor_verdict):
        ...   # raises MonitorBlocked(categories) when the verdict or an action blocks
    async for event in released(config, stage, turn, upstream_events):
        ...   # the same, holding nothing when nothing is held

A blocking verdict is seen at the next event the upstream sends, or at once while an
event is held.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from deltaguard.classifiers.actions import ACTIONABLE_TYPES
from deltaguard.errors import TurnBlocked
from deltaguard.lanes.provenance import TurnActions
from deltaguard.streams import close_source

if TYPE_CHECKING:
    from deltaguard.gateway.config import GatewayConfig
    from deltaguard.lanes.stage import SafetyStage, Turn

log = logging.getLogger("deltaguard.gateway")

HoldMode = Literal["actions", "all", "off"]

# Events that never wait: the response's creation and progress carry no output.
_NEVER_HELD = frozenset({"response.created", "response.queued", "response.in_progress"})
# Events that always wait: the end of the response carries its whole output.
_ALWAYS_HELD = frozenset({"response.completed", "response.incomplete", "response.failed"})


class MonitorBlocked(TurnBlocked):
    """The monitor lane's verdict on the turn's untrusted input blocks it, mid-response."""


class ActionBlocked(MonitorBlocked):
    """One of the model's actions used strings untrusted content told it to use: it is not
    released, and the response ends as for any block mid-response (`reason` says which)."""

    def __init__(self, categories: list[str], reason: str) -> None:
        super().__init__(categories, reason=reason)


def release_hold(
    config: GatewayConfig, stage: SafetyStage, turn: Turn, *, chat: bool = False
) -> ReleaseHold | None:
    """What of the turn's response waits, and for what (None: nothing): the monitor
    verdict when the turn awaits one and `config.release_hold` is not "off", and the
    action check of every actionable item unless the policy turns it off."""
    actions = TurnActions.of(stage, turn)
    mode = config.release_hold if turn.awaits_monitor else "off"
    if mode == "off" and actions is None:
        return None
    return ReleaseHold(mode, config.release_hold_timeout_s, chat=chat, actions=actions)


async def released(
    config: GatewayConfig, stage: SafetyStage, turn: Turn, events: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    """`events` as the turn's hold lets them go (`release_hold`; as they come when nothing
    is held); closing it closes `events`."""
    hold = release_hold(config, stage, turn)
    stream = events if hold is None else hold.stream(events, turn.monitor_verdict)
    try:
        async for event in stream:
            yield event
    finally:
        await close_source(stream)


class ReleaseHold:
    """Which of a response's events wait for the turn's monitor verdict, and for how long.

    `timeout_s`: the longest wait; past it the events are released (logged): a stalled
    monitor lane must not stall every agent, and its flag still blocks the next turn."""

    def __init__(
        self,
        mode: HoldMode = "actions",
        timeout_s: float = 30.0,
        *,
        chat: bool = False,
        actions: TurnActions | None = None,
    ) -> None:
        """`chat`: the events are Chat Completions chunks (a tool call is a delta's
        `tool_calls`; the end is a `finish_reason`, or the usage chunk). `actions`: the
        turn's action check, run on each actionable item before it is released."""
        self.mode = mode
        self.timeout_s = timeout_s
        self.chat = chat
        self.actions = actions

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
        blocking verdict, and `ActionBlocked` at a blocked action (the caller then closes
        `events`, cancelling the generation). The upstream is read in the caller's task:
        its streams are not task-safe."""
        if self.mode == "off" and self.actions is None:
            async for event in events:
                yield event
            return
        monitor = _MonitorWait(self, verdict) if self.mode != "off" else None
        actions = _ActionWatch(self.actions, self.chat) if self.actions is not None else None
        try:
            async for event in events:
                released = [event] if actions is None else await actions.release(event)
                for ev in released:
                    if monitor is not None:
                        await monitor.wait(ev)
                    yield ev
        finally:
            if monitor is not None:
                monitor.cancel()
            await close_source(events)  # a block: the upstream's stream is closed, cancelling it


class _MonitorWait:
    """The monitor verdict's wait: from the first held event on, each event waits for it."""

    def __init__(self, hold: ReleaseHold, verdict: Callable[[], Awaitable[list[str]]]) -> None:
        self.hold = hold
        self.judged: asyncio.Future[list[str]] = asyncio.ensure_future(verdict())
        self.holding = False
        self.timed_out = False

    async def wait(self, event: dict[str, Any]) -> None:
        if self.timed_out:
            return
        if self.judged.done():
            _raise_if_blocked(self.judged)
            return
        self.holding = self.holding or self.hold.holds(event)
        if not self.holding:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self.judged), self.hold.timeout_s)
        except TimeoutError:
            log.warning("no monitor verdict in %g s: output released", self.hold.timeout_s)
            self.timed_out = True
        else:
            _raise_if_blocked(self.judged)

    def cancel(self) -> None:
        if not self.judged.done():
            self.judged.cancel()


class _ActionWatch:
    """Holds a response's events from an action's start until the action is complete and
    judged; raises `ActionBlocked` for one the check blocks. Each action is judged once:
    at its `output_item.done`, or at the terminal event for one the upstream never closed
    (a chat stream's calls: at the chunk with the `finish_reason`)."""

    def __init__(self, actions: TurnActions, chat: bool) -> None:
        self.actions = actions
        self.chat = chat
        self.open: set[Any] = set()  # actions begun, not yet judged (their output_index)
        self.judged: set[str] = set()  # their ids
        self.held: list[dict[str, Any]] = []
        self.calls: dict[tuple[int, int], dict[str, str]] = {}  # a chat stream's calls so far

    async def release(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events `event` lets go, in order ([] while an action is open)."""
        if self.chat:
            await self._chunk(event)
        else:
            await self._event(event)
        if self.open:
            self.held.append(event)
            return []
        out, self.held = [*self.held, event], []
        return out

    async def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        item = event.get("item")
        actionable = isinstance(item, dict) and item.get("type") in ACTIONABLE_TYPES
        where = event.get("output_index", item.get("id") if isinstance(item, dict) else None)
        if kind == "response.output_item.added" and actionable:
            self.open.add(where)
        elif kind == "response.output_item.done" and actionable:
            self.open.discard(where)
            await self._judge(item, where)
        elif kind in _ALWAYS_HELD and isinstance(event.get("response"), dict):
            self.open.clear()
            for i, out in enumerate(event["response"].get("output") or []):
                if isinstance(out, dict) and out.get("type") in ACTIONABLE_TYPES:
                    await self._judge(out, i)

    async def _chunk(self, chunk: dict[str, Any]) -> None:
        finished = False
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            parts = list(delta.get("tool_calls") or [])
            if isinstance(delta.get("function_call"), dict):
                parts.append({"index": -1, "function": delta["function_call"]})
            for part in parts:
                if not isinstance(part, dict):
                    continue
                key = (int(choice.get("index") or 0), int(part.get("index") or 0))
                call = self.calls.setdefault(key, {"name": "", "arguments": ""})
                fn = part.get("function") if isinstance(part.get("function"), dict) else {}
                call["name"] += str(fn.get("name") or "")
                call["arguments"] += str(fn.get("arguments") or "")
                self.open.add(key)
            finished = finished or choice.get("finish_reason") is not None
        if finished or (chunk.get("usage") and not chunk.get("choices")):
            self.open.clear()
            for key, call in self.calls.items():
                await self._judge({"type": "function_call", **call}, f"{key[0]}.{key[1]}")

    async def _judge(self, item: dict[str, Any], where: Any) -> None:
        key = str(item.get("call_id") or item.get("id") or json.dumps(item, sort_keys=True))
        if key in self.judged:
            return
        self.judged.add(key)
        verdict = await self.actions.check(item, where if isinstance(where, int | str) else str(where))
        if verdict is not None and self.actions.blocks:
            raise ActionBlocked([self.actions.policy.category], verdict.reason())


def _raise_if_blocked(judged: asyncio.Future[list[str]]) -> None:
    if judged.exception() is not None:
        log.error("the monitor verdict failed: releasing the model's output", exc_info=judged.exception())
        return
    categories = judged.result()
    if categories:
        raise MonitorBlocked(categories)

"""`ReleaseHold`: which events wait for the monitor verdict, and what a verdict does."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from deltaguard.gateway.release import MonitorBlocked, ReleaseHold

CALL = {"type": "function_call", "name": "run", "call_id": "c", "arguments": "{}"}
EVENTS = [
    {"type": "response.created", "response": {}},
    {"type": "response.output_text.delta", "delta": "Reading"},
    {"type": "response.output_item.added", "item": CALL},
    {"type": "response.function_call_arguments.delta", "delta": "{}"},
    {"type": "response.output_item.done", "item": CALL},
    {"type": "response.completed", "response": {}},
]


async def _events(closed: list[bool]):
    try:
        for event in EVENTS:
            yield event
    finally:
        closed.append(True)


async def _run(mode: str, verdict: list[str], delay_s: float = 0.05, timeout_s: float = 5.0):
    """(event type, verdict already in) for each event released; whether the stream was closed."""
    judged = asyncio.Event()

    async def monitor() -> list[str]:
        await asyncio.sleep(delay_s)
        judged.set()
        return verdict

    closed: list[bool] = []
    seen = []
    with pytest.raises(MonitorBlocked) if verdict else contextlib.nullcontext():
        async for event in ReleaseHold(mode, timeout_s).stream(_events(closed), monitor):
            seen.append((event["type"], judged.is_set()))
    return seen, bool(closed)


def test_actions_hold_from_the_first_call_on_and_text_streams_before():
    seen, _ = asyncio.run(_run("actions", []))
    assert [t for t, _ in seen] == [e["type"] for e in EVENTS]
    assert [judged for _, judged in seen] == [False, False, True, True, True, True]


def test_all_holds_everything_but_the_creation():
    seen, _ = asyncio.run(_run("all", []))
    assert [judged for _, judged in seen] == [False, True, True, True, True, True]


def test_a_blocking_verdict_releases_no_call_and_closes_the_upstream():
    seen, closed = asyncio.run(_run("actions", ["prompt_injection"]))
    assert [t for t, _ in seen] == ["response.created", "response.output_text.delta"]
    assert closed


def test_past_the_timeout_the_output_is_released():
    seen, _ = asyncio.run(_run("actions", [], delay_s=5.0, timeout_s=0.05))
    assert [t for t, _ in seen] == [e["type"] for e in EVENTS]


def test_off_releases_at_once():
    seen, _ = asyncio.run(_run("off", [], delay_s=1.0))
    assert not any(judged for _, judged in seen)

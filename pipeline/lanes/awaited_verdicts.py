"""Verdicts a gateway waits for from elsewhere: distributed mode's monitor workers.

The embedded monitor lane settles the verdict of each turn a gateway holds itself. In
distributed mode the turn goes to a worker through Kafka and its verdict comes back on
another topic, or never (a worker down, a broker out, a turn the worker failed on).
`AwaitedVerdicts` keeps one future per held turn, settled by its verdict when that comes
or, past the deadline, by the fallback: "release" (no verdict: the hold lets the output
go) or "block" (the turn is refused as if its untrusted input were an injection).

    verdicts = AwaitedVerdicts(timeout_s=10.0, fallback="release")
    future = verdicts.expect("acme", "resp_1")     # the publisher, before it publishes
    verdicts.settle("acme", "resp_1", verdict)     # the subscriber, when the verdict is in
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal

from deltaguard.events import VerdictEvent
from deltaguard.state.scoring import TurnVerdict

log = logging.getLogger("deltaguard.stage")

Fallback = Literal["release", "block"]
Pending = asyncio.Future[TurnVerdict | None]
# What a turn is refused for under fallback "block": the hold exists because its
# untrusted input may carry an injection, and nothing said it does not.
UNJUDGED_CATEGORY = "prompt_injection"


class AwaitedVerdicts:
    """The verdict futures of the turns this gateway holds, keyed by tenant and response id.

    A future is settled once: by `settle`, by the deadline (`timeout_s` after `expect`),
    or by `discard`; never cancelled, so a hold waiting on it always gets an answer.
    Entries live no longer than the deadline, so the table stays bounded by the turns
    published in one `timeout_s`."""

    def __init__(self, timeout_s: float, fallback: Fallback = "release") -> None:
        if not timeout_s > 0:
            raise ValueError(f"the verdict deadline must be positive, got {timeout_s!r}")
        if fallback not in ("release", "block"):
            raise ValueError(f"the verdict fallback is 'release' or 'block', got {fallback!r}")
        self.timeout_s = timeout_s
        self.fallback = fallback
        self._pending: dict[tuple[str, str], tuple[Pending, asyncio.TimerHandle]] = {}
        self.settled = 0  # a verdict came in time
        self.expired = 0  # the deadline passed: the fallback applied
        self.failed = 0  # the worker could not score the turn: the fallback applied at once

    @property
    def pending(self) -> int:
        return len(self._pending)

    def expect(self, tenant: str, response_id: str) -> Pending:
        """The future of a turn's verdict; its deadline starts now. A turn published again
        while its verdict is awaited shares that future (the worker answers a turn once)."""
        key = (tenant, response_id)
        if key in self._pending:
            return self._pending[key][0]
        loop = asyncio.get_running_loop()
        future: Pending = loop.create_future()
        self._pending[key] = (future, loop.call_later(self.timeout_s, self._expire, key))
        return future

    def settle(self, tenant: str, response_id: str, verdict: TurnVerdict | None) -> bool:
        """Settle a held turn with its verdict (None: the worker could not judge it, and
        the fallback applies now). False when this gateway holds no such turn (another
        gateway's, or one past its deadline)."""
        entry = self._pending.pop((tenant, response_id), None)
        if entry is None:
            return False
        future, timer = entry
        timer.cancel()
        if verdict is None:
            self.failed += 1
            log.warning("the worker failed on %s: verdict fallback %s", response_id, self.fallback)
            verdict = self._fallback()
        else:
            self.settled += 1
        if not future.done():
            future.set_result(verdict)
        return True

    def discard(self, tenant: str, response_id: str) -> None:
        """Forget a turn that could not be published: no verdict will come, so its future
        (awaited only where the same turn was published before) gets the fallback now."""
        entry = self._pending.pop((tenant, response_id), None)
        if entry is not None:
            entry[1].cancel()
            if not entry[0].done():
                entry[0].set_result(self._fallback())

    def _expire(self, key: tuple[str, str]) -> None:
        entry = self._pending.pop(key, None)
        if entry is None:
            return
        self.expired += 1
        log.warning("no verdict on %s in %g s: verdict fallback %s", key[1], self.timeout_s, self.fallback)
        if not entry[0].done():
            entry[0].set_result(self._fallback())

    def _fallback(self) -> TurnVerdict | None:
        if self.fallback == "release":
            return None
        return TurnVerdict("block", {}, [UNJUDGED_CATEGORY], {}, 0, [])


def verdict_of(event: VerdictEvent) -> TurnVerdict | None:
    """The verdict a worker's event carries, as far as a held turn needs it (decision,
    categories, scores); None when the worker could not score the turn."""
    if event.decision == "error":
        return None
    return TurnVerdict(event.decision, dict(event.scores), list(event.categories), {}, 0, [])

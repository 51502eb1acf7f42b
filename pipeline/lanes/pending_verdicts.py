"""Monitor verdicts still to come, which a conversation's next turn waits for.

The monitor lane judges a turn beside inference, and its flag refuses the conversation's
later turns (`lockout.ConversationLockout.flagged`). A continuation that arrives before
the verdict (on another replica, or on this one when nothing held the response for it:
a user's own message, `release_hold="off"`) would go without it. So the lane notes each
job it queues as pending (`note`) and clears it once the job is done (`done`: its flags
are written by then), and the gate waits for the conversation's pending jobs before it
reads the flags (`pending`, then `wait`). On a shared state backend (redis) the pending jobs are kept
there, one hash per conversation, so that a replica waits for every replica's verdicts;
otherwise they are kept in the process.

The wait is bounded (`VerdictWait.deadline_s`); past it, `VerdictWait.late` decides:
"proceed" (the turn goes on without the verdict; logged and counted in `late`) or
"refuse" (`MonitorVerdictPending`, a 503 the client retries). Each pending entry names
when it stops counting, so one left behind by a replica that died holds no turn past
its deadline.

    verdicts = PendingVerdicts(VerdictWait(deadline_s=5.0), backend)
    verdicts.judged = True                          # a monitor lane notes its jobs here
    verdicts.note("acme", "conv_1", "resp_1")       # the lane queued resp_1
    await verdicts.wait("acme", "conv_1")           # the next turn waits until ...
    verdicts.done("acme", "conv_1", "resp_1")       # ... resp_1's verdict is in
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from deltaguard import defaults
from deltaguard.errors import MonitorVerdictPending, StateBackendError
from deltaguard.state.backends import StateBackend
from deltaguard.state.tiers import key_text

log = logging.getLogger("deltaguard.stage")

LatePolicy = Literal["proceed", "refuse"]
# The first and the longest pause between two reads of a shared backend while waiting:
# a verdict that lands is seen within 20 ms, and a wait costs at most 50 reads a second.
POLL_S = (0.002, 0.02)


@dataclass(frozen=True, slots=True)
class VerdictWait:
    """How long a turn waits for its conversation's pending monitor verdicts (0: never),
    and what it does when they are late ("proceed" or "refuse")."""

    deadline_s: float = defaults.MONITOR_VERDICT_WAIT_S
    late: LatePolicy = defaults.MONITOR_VERDICT_LATE

    def __post_init__(self) -> None:
        if not (math.isfinite(self.deadline_s) and self.deadline_s >= 0):
            raise ValueError(f"monitor verdict wait: deadline_s must be >= 0 seconds, got {self.deadline_s}")
        if self.late not in ("proceed", "refuse"):
            raise ValueError(f"monitor verdict wait: late must be 'proceed' or 'refuse', got {self.late!r}")


class PendingVerdicts:
    """The monitor jobs queued and not yet done, per (tenant, conversation) (module docstring).

    Two kinds of job: a turn's verdict, which the conversation's next turn waits for
    (`wait`), and the folding of a response's output into the lane's record (`output=True`),
    which only another replica's monitor lane waits for (`outputs_in`), before it folds a
    turn that continues that response (in one process the lane takes jobs in order).

    `judged`: a queued monitor lane notes its jobs here (set by it); without one, nothing
    is waited for. `late` counts the waits that ran past the deadline, `waited` those that
    found something pending, `wait_s` the seconds turns spent in `wait`, all of them."""

    def __init__(
        self,
        wait: VerdictWait | None = None,
        backend: StateBackend | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = wait or VerdictWait()
        self.backend = backend if backend is not None and backend.shared else None
        self.clock = clock  # wall clock: entries in a shared backend are read by other hosts
        self.judged = False
        self.late = 0
        self.waited = 0
        self.wait_s = 0.0
        # (tenant, conversation) -> the jobs noted here: a verdict's event, None for an output
        self._local: dict[tuple[str, str], dict[str, asyncio.Event | None]] = {}

    @property
    def active(self) -> bool:
        return self.judged and self.policy.deadline_s > 0

    def note(self, tenant: str, conversation_id: str, job: str, *, output: bool = False) -> None:
        """The monitor lane queued `job` (a response id): its verdict, or its `output`."""
        if not self.active or (output and self.backend is None):
            return
        name = _name(job, output)
        if self.backend is not None:  # the key outlives its newest entry by a second, no more
            until = self.clock() + self.policy.deadline_s
            self.backend.put_field(
                self._key(tenant, conversation_id), name, repr(until), self.policy.deadline_s + 1
            )
        self._local.setdefault((tenant, conversation_id), {})[name] = None if output else asyncio.Event()

    def done(self, tenant: str, conversation_id: str, job: str, *, output: bool = False) -> None:
        """`job` is done, judged or not (a failed job has no verdict to wait for). A job
        never noted, or done already, changes nothing."""
        key, name = (tenant, conversation_id), _name(job, output)
        local = self._local.get(key)
        if local is None or name not in local:
            return
        event = local.pop(name)
        if not local:
            del self._local[key]
        if self.backend is not None:
            try:
                self.backend.delete_field(self._key(tenant, conversation_id), name)
            except StateBackendError:  # its entry lapses at its deadline; the waiters here go on
                log.exception("could not clear the pending monitor job %s of %s", name, conversation_id)
        if event is not None:
            event.set()

    def pending(self, tenant: str, conversation_id: str) -> bool:
        """Whether `wait` has anything to wait for: a verdict on the conversation pending
        here, or on another replica of a shared backend (read from it: call it off the
        event loop, as the gate's job does)."""
        if not self.active:
            return False
        mine = dict(self._local.get((tenant, conversation_id)) or {})  # a copy: the loop changes it
        if any(event is not None for event in mine.values()):
            return True
        if self.backend is None:
            return False
        fields = self.backend.fields(self._key(tenant, conversation_id))
        return any(not name.endswith(_OUTPUT) and name not in mine for name in fields)

    async def wait(self, tenant: str, conversation_id: str) -> float:
        """Wait until no verdict on the conversation is pending (here, and on every replica
        of a shared backend); the seconds waited. Past the deadline: logged and counted,
        then the turn proceeds, or `MonitorVerdictPending` ("refuse")."""
        if not self.active:
            return 0.0
        start = time.monotonic()
        try:
            local = [e for e in self._local.get((tenant, conversation_id), {}).values() if e is not None]
            if local:
                try:
                    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in local)), self.policy.deadline_s)
                except TimeoutError:
                    return self._late(conversation_id, start)
            remote = await self._remote_done(tenant, conversation_id, start, outputs=False)
            if remote is None:
                return self._late(conversation_id, start)
            self.waited += bool(local) or remote
            return time.monotonic() - start
        finally:
            self.wait_s += time.monotonic() - start

    async def outputs_in(self, tenant: str, conversation_id: str) -> None:
        """Wait until no other replica has the conversation's output pending (bounded by
        the deadline; past it the lane folds without it, logged)."""
        if self.active and (
            await self._remote_done(tenant, conversation_id, time.monotonic(), outputs=True) is None
        ):
            log.warning(
                "conversation %s: another replica's output is late; folded without it", conversation_id
            )

    async def _remote_done(
        self, tenant: str, conversation_id: str, start: float, *, outputs: bool
    ) -> bool | None:
        """Poll the shared backend until none of the conversation's jobs of that kind that
        other replicas noted is pending: whether any was. None: late (this wait's deadline
        passed, or a job's own did, and its replica never cleared it)."""
        pause, found = POLL_S[0], False
        while self.backend is not None:
            mine = self._local.get((tenant, conversation_id), {})
            jobs = [
                float(until)
                for name, until in self.backend.fields(self._key(tenant, conversation_id)).items()
                if name.endswith(_OUTPUT) == outputs and name not in mine
            ]
            if not jobs:
                break
            found = True
            left = start + self.policy.deadline_s - time.monotonic()
            if left <= 0 or max(jobs) <= self.clock():
                return None
            await asyncio.sleep(min(pause, left))
            pause = min(2 * pause, POLL_S[1])
        return found

    def _late(self, conversation_id: str, start: float) -> float:
        waited = time.monotonic() - start
        self.waited += 1
        self.late += 1
        log.warning(
            "conversation %s: monitor verdicts still pending after %.1f s: %s",
            conversation_id,
            waited,
            "refusing the turn" if self.policy.late == "refuse" else "the turn proceeds without them",
        )
        if self.policy.late == "refuse":
            raise MonitorVerdictPending(waited)
        return waited

    def _key(self, tenant: str, conversation_id: str) -> str:
        return f"monitor/pending/{key_text((tenant, conversation_id))}"


_OUTPUT = "/output"


def _name(job: str, output: bool) -> str:
    return job + _OUTPUT if output else job

"""DeltaGuard's lanes for a proxy that sees each turn's whole history (framework-free).

Proxies such as LiteLLM forward Chat Completions and Responses requests whose body
carries the conversation so far, with no id DeltaGuard issued. `HistoryGate` wraps a
`SafetyStage` for them:

    gate = HistoryGate(scorer, monitor=("lexical",), flag_sink=..., billing_sink=...)
    await gate.start()
    turn = await gate.check(items, tenant="team-a")       # pre-call: gate lane
    if turn.blocked: ...
    verdict = await gate.monitor(turn)                    # during the call: monitor lane
    if verdict is not None and verdict.decision == "block": ...
    await gate.complete(turn, output_items, usage)        # post-call: output + billing, queued
    await gate.aclose()

- Gate lane: `SafetyStage.begin(history=...)`, so only the suffix after the longest history
  prefix already scored is folded (the hash chain over items finds it).
- Conversations are told apart by that same chain (the conversation store keeps it): a
  turn whose history extends one that ended in a model answer continues that
  conversation's id, so flag and billing events group by conversation and monitor
  flags are enforced on the conversation's next turn, with no session id from the client.
- Monitor lane: the monitor classifiers fold the same history, delta-only, on their own
  trackers, while the model runs; the caller decides whether a `block` verdict stops
  the answer (LiteLLM's during-call contract) and the stage blocks the next turn anyway.
- Responses API continuations (`previous_response_id` naming a response this gate
  completed) are checked with `SafetyStage.begin(previous_response_id=...)`; an unknown id raises
  `PreviousResponseNotFound`, never a silent pass.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from deltaguard.errors import PreviousResponseNotFound
from deltaguard.events import DEFAULT_TENANT, Event
from deltaguard.items import Item
from deltaguard.lanes.stage import SafetyStage, StageConfig, Turn
from deltaguard.sinks import EventSink, MemorySink
from deltaguard.state.scoring import Scorer, TurnVerdict
from deltaguard.state.store import LruTtlMap
from deltaguard.usage import Usage

log = logging.getLogger("deltaguard.integrations")


# A request through the proxy is a stage `Turn`: its gate verdict and whole history.
ProxyTurn = Turn


class HistoryGate:
    """A `SafetyStage` fronted for full-history clients (see module docstring).

    The stage owns both lanes, the inference pool and the sinks: the monitor lane's
    flags are recorded and counted like any other; only its timing is the proxy's (it
    awaits `monitor` beside the model call instead of the stage queueing it).
    """

    def __init__(
        self,
        scorer: Scorer,
        monitor: Sequence[str] = (),
        flag_sink: EventSink | None = None,
        billing_sink: EventSink | None = None,
        config: StageConfig | None = None,
        **stage_options: Any,
    ) -> None:
        """`stage_options`: the rest of `SafetyStage`'s options (metrics, recorder, limiter)."""
        self.stage = SafetyStage(
            scorer,
            monitor=monitor,
            flag_sink=flag_sink or MemorySink(),
            billing_sink=billing_sink or MemorySink(),
            config=config,
            queue_monitor=False,
            **stage_options,
        )
        self.config = self.stage.config
        self.flag_sink = self.stage.flag_sink
        self.billing_sink = self.stage.billing_sink
        self.monitor_scorer = self.stage.monitor_scorer
        self.gate_classifiers = [c.name for c in self.stage.gate_scorer.classifiers]
        limits = self.config.store
        # (tenant, the proxy's response id) -> DeltaGuard's response id, for continuations
        self._responses: LruTtlMap[tuple[str, str], str] = LruTtlMap(limits.max_responses, limits.ttl_s)

    async def start(self) -> None:
        await self.stage.start()

    async def aclose(self) -> dict[str, int]:
        """Drain every lane and sink; `undelivered` then holds what could not be written."""
        return await self.stage.aclose()

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait until queued output scoring and billing are done (`SafetyStage.drain`)."""
        await self.stage.drain(timeout_s)

    @property
    def undelivered(self) -> list[Event]:
        return self.stage.undelivered

    # -- pre-call: gate lane -----------------------------------------------------------

    async def check(self, items: Sequence[Item], tenant: str = DEFAULT_TENANT) -> Turn:
        """Gate a turn from its whole history; only the unseen suffix is scored."""
        return await self.stage.begin(tenant, history=items, response_id=f"dg_{uuid.uuid4().hex}")

    async def check_continuation(
        self, previous_response_id: str, new_items: Sequence[Item], tenant: str = DEFAULT_TENANT
    ) -> Turn:
        """Gate a Responses API turn continuing a response this gate completed.

        `previous_response_id` is the proxy's id (what the client holds). Raises
        `PreviousResponseNotFound` when it is unknown here or its history was evicted.
        """
        previous = self._responses.get((tenant, previous_response_id))
        if previous is None:
            raise PreviousResponseNotFound(previous_response_id)
        return await self.stage.begin(
            tenant, new_items=new_items, previous_response_id=previous, response_id=f"dg_{uuid.uuid4().hex}"
        )

    # -- during the call: monitor lane -------------------------------------------------

    async def monitor(self, turn: Turn) -> TurnVerdict | None:
        """Score the turn with the monitor classifiers (None when there are none).

        What they flag goes to the flag sink and is enforced on the conversation's next
        turn by the gate; whether a `block` stops this turn's answer is the caller's call.
        """
        return await turn.monitor()

    def blocking(self, categories: Sequence[str]) -> list[str]:
        """The categories among `categories` whose policy action is `block`."""
        cats = self.stage.policy.categories
        return [c for c in categories if c in cats and cats[c].action == "block"]

    # -- post-call: output scoring and billing -----------------------------------------

    async def complete(
        self,
        turn: Turn,
        output: Sequence[Item],
        usage: Usage,
        upstream_response_id: str | None = None,
    ) -> None:
        """Queue output scoring and billing (returns at once). The answer joins the
        history, so the client's next turn, which echoes it, continues this conversation."""
        await turn.finish(output, usage)
        if upstream_response_id:
            self._responses.put((turn.gate.tenant, upstream_response_id), turn.response_id)

"""Distributed mode's stand-in for the monitor lane: each turn's delta goes to a sink.

Remote monitor workers (`deltaguard worker`) score what is published and send their
flags back (`SafetyStage.mark_flagged`); the stage runs no monitor classifiers itself.
A turn with untrusted input that the gate let through asks the workers for its verdict
(`TurnEvent.verdict_requested`), and the gateway holds the model's actions until it is
in or its deadline passes (`awaited_verdicts.AwaitedVerdicts`, settled by the verdict subscriber).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from deltaguard.events import TurnEvent
from deltaguard.items import Item
from deltaguard.lanes.awaited_verdicts import AwaitedVerdicts
from deltaguard.lanes.turn import GateResult
from deltaguard.sinks import SinkWriter
from deltaguard.state.scoring import TurnVerdict
from deltaguard.state.store import ResponseRecord


class TurnPublisher:
    """Publishes what a remote worker has not seen of each gated turn.

    `verdicts`: where the held turns' verdicts are awaited (None: no turn waits for one,
    and a flag blocks the conversation's next turn only)."""

    def __init__(self, writer: SinkWriter, verdicts: AwaitedVerdicts | None = None) -> None:
        self.writer = writer
        self.verdicts = verdicts

    async def submit_turn(
        self, gate: GateResult, record: ResponseRecord, resent: bool
    ) -> asyncio.Future[TurnVerdict | None] | None:
        """Publish the turn. For a turn with untrusted input that the gate let through,
        returns the future of the worker's verdict on it (else None)."""
        # The previous response's output, then this turn's new items (or a resent history).
        parent = record.parent
        items = record.items if resent else [*(parent.output_items if parent else ()), *record.items]
        awaited = self.verdicts is not None and gate.untrusted_input and not gate.blocked
        event = TurnEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            previous_response_id=parent.response_id if parent is not None else None,
            items=[i.to_wire() for i in items],
            full_history=resent,
            tenant=gate.tenant,
            verdict_requested=awaited,
        )
        if not awaited:
            await self.writer.put(event)
            return None
        assert self.verdicts is not None
        # Awaited before it is published: the verdict cannot come back first.
        verdict = self.verdicts.expect(gate.tenant, gate.response_id)
        try:
            await self.writer.put(event)
        except BaseException:
            self.verdicts.discard(gate.tenant, gate.response_id)
            raise
        return verdict

    async def submit_output(self, gate: GateResult, output: Sequence[Item]) -> None:
        """Nothing: the output reaches the workers with the next turn's delta."""

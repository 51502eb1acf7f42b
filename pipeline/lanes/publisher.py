"""Distributed mode's stand-in for the monitor lane: each turn's delta goes to a sink.

Remote monitor workers (`deltaguard worker`) score what is published and send their
flags back (`SafetyStage.mark_flagged`); the stage runs no monitor classifiers itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from deltaguard.events import TurnEvent
from deltaguard.items import Item
from deltaguard.lanes.turn import GateResult
from deltaguard.sinks import SinkWriter
from deltaguard.state.store import ResponseRecord


class TurnPublisher:
    """Publishes what a remote worker has not seen of each gated turn."""

    def __init__(self, writer: SinkWriter) -> None:
        self.writer = writer

    async def submit_turn(self, gate: GateResult, record: ResponseRecord, resent: bool) -> None:
        """Publish the turn. Returns None: remote workers send flags only, never a verdict
        on a turn that raised nothing, so nothing here can be waited for."""
        # The previous response's output, then this turn's new items (or a resent history).
        parent = record.parent
        items = record.items if resent else [*(parent.output_items if parent else ()), *record.items]
        event = TurnEvent.build(
            conversation_id=gate.conversation_id,
            response_id=gate.response_id,
            previous_response_id=parent.response_id if parent is not None else None,
            items=[i.to_wire() for i in items],
            full_history=resent,
            tenant=gate.tenant,
        )
        await self.writer.put(event)

    async def submit_output(self, gate: GateResult, output: Sequence[Item]) -> None:
        """Nothing: the output reaches the workers with the next turn's delta."""

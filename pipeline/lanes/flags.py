"""Where every lane's flags go: the flag sink's writer, then the recorder.

The gate, monitor and post-inference lanes all raise flags the same way: the event is
queued for the flag sink and, when the stage records flagged conversations, the
conversation is queued for the recorder, off the response path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from deltaguard.errors import PreviousResponseNotFound
from deltaguard.events import FlagEvent
from deltaguard.sinks import FlagRecorder, SinkWriter
from deltaguard.state.tracker import ConversationTracker

log = logging.getLogger("deltaguard.stage")


class FlagOutlet:
    """Queues flag events for the flag sink and their conversations for the recorder.

    `tracker(tenant)`: the gate lane's tracker, whose records hold the model's outputs
    of earlier turns too (the monitor lane's store does not)."""

    def __init__(
        self,
        writer: SinkWriter,
        recorder: FlagRecorder | None,
        tracker: Callable[[str], ConversationTracker],
    ) -> None:
        self.writer = writer
        self.recorder = recorder
        self._tracker = tracker

    async def put(self, event: FlagEvent, tenant: str, *, record: bool = True) -> None:
        """Queue `event`; `record`: queue its conversation for the recorder too."""
        await self.writer.put(event)
        if record:
            await self.record(event, tenant)

    async def record(self, event: FlagEvent, tenant: str) -> None:
        """Queue the flagged conversation for the recorder (when there is one)."""
        if self.recorder is None:
            return
        try:
            rec = self._tracker(tenant).record(event.response_id)
        except PreviousResponseNotFound:
            log.warning("flag %s not recorded: response %s evicted", event.event_id, event.response_id)
            return
        await self.recorder.submit(event, rec, tenant)

"""The one rule for a stream the gateway stops reading: close its source now."""

from __future__ import annotations

from typing import Any


async def close_source(source: Any) -> None:
    """Close `source` if it can be closed (an async generator, an upstream's event stream).

    A stream left mid-way (a block, a client gone, an error) must stop its producer at once,
    not when the garbage collector finds it: the upstream's request is cancelled, its usage
    so far is read, and the generator's own `finally` runs on this task."""
    aclose = getattr(source, "aclose", None)
    if aclose is not None:
        await aclose()

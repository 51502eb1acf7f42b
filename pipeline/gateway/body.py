"""Where a request's body is parsed: on the event loop when it is small, else on the
request path's classifier pool as its tenant's work.

Parsing is CPU: JSON, the shape check, items, their token counts and digests. A 0.8 MB
body costs tens of milliseconds and the largest allowed (`max_request_bytes`) ten times
that, all of it on the event loop, where every other tenant's requests and streams
wait. Off the loop it runs under the pool's fairness (`lanes.limiter`): a tenant that
sends large bodies waits for its own share of the threads, and the loop keeps serving.
A small body parses faster than a thread hop costs, so it stays on the loop.

    parser = BodyParser(stage, inline_bytes=64 * 1024)
    req = await parser(lambda raw: read_create(raw, limits), await request.body(), tenant)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from deltaguard.lanes.stage import SafetyStage

T = TypeVar("T")


class BodyParser:
    def __init__(self, stage: SafetyStage, inline_bytes: int) -> None:
        """`inline_bytes`: the largest body parsed on the event loop."""
        self.stage = stage
        self.inline_bytes = inline_bytes

    async def __call__(self, parse: Callable[[bytes | str], T], raw: bytes | str, tenant: str) -> T:
        """`parse(raw)`, as `tenant`'s work when `raw` is large; raises what it raises."""
        if len(raw) <= self.inline_bytes:
            return parse(raw)
        result: T = await self.stage.run(parse, raw, tenant=tenant)
        return result

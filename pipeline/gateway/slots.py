"""Requests in flight, per tenant and in all, across the gateway's APIs.

Responses (HTTP and WebSocket), chat completions and guard checks share one count: a
tenant that floods the guard API holds the same slots as one that floods responses, and
finds its limit (`max_inflight_per_tenant`: 429 `tenant_overloaded`) before the process
does (`max_inflight_responses`: 503 `server_overloaded`); each with `Retry-After`. What a
request holds while in flight (its body, its items, its turn) is bounded by the request
limits; these bound how many at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from deltaguard.gateway.http_errors import server_overloaded, tenant_overloaded


class Slots:
    """Counts of requests in flight; `hold` takes one for a block, or refuses."""

    def __init__(self, per_tenant: int, total: int) -> None:
        self.per_tenant = per_tenant
        self.total = total
        self.held = 0
        self.by_tenant: dict[str, int] = {}

    def check(self, tenant: str, what: str) -> None:
        """Raise the refusal `hold` would raise now, holding nothing."""
        mine = self.by_tenant.get(tenant, 0)
        if mine >= self.per_tenant:  # one tenant cannot take every slot
            raise tenant_overloaded(mine)
        if self.held >= self.total:
            raise server_overloaded(self.held, what)

    @contextlib.contextmanager
    def hold(self, tenant: str, what: str, *, admitted: bool = False) -> Iterator[None]:
        """One slot of `tenant`'s for the block; `what` names the request in a 503.
        `admitted`: checked already (a chat completion at its gate), so counted whatever
        the counts are now: its stream may have begun, and it cannot be refused any more."""
        if not admitted:
            self.check(tenant, what)
        self.held += 1
        self.by_tenant[tenant] = self.by_tenant.get(tenant, 0) + 1
        try:
            yield
        finally:
            self.held -= 1
            left = self.by_tenant.pop(tenant) - 1
            if left:
                self.by_tenant[tenant] = left

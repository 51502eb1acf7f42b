"""Which conversations are refused before their turn is even scored, and why.

Two things refuse a conversation's later turns: a monitor-lane flag in a `block`
category (local, or from a remote worker), and the repeated-block lock-out. A blocked
turn never joins the history, so a client could rephrase a refused request again and
again from the same point until one version passes; after `block_limit` turns of one
conversation blocked on their own content in `probe_categories`, the rest of it is
refused too.

>>> lockout = ConversationLockout(block_limit=2, probe_categories=frozenset({"jailbreak"}))
>>> lockout.count_blocked_turn("default", "c1", ["jailbreak"]) is None
True
>>> lockout.count_blocked_turn("default", "c1", ["jailbreak"])
['jailbreak']
>>> sorted(lockout.flagged("default", "c1"))
['jailbreak']
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from deltaguard import defaults
from deltaguard.state.backends import StateBackend
from deltaguard.state.tiers import StateMap

_ENTRY_BYTES = 200  # a conversation's key and its categories


class ConversationLockout:
    """Per (tenant, conversation): the categories that refuse its next turns, and how many
    of its turns were blocked on their own content. Bounded like the conversation store,
    and kept in its backend (read from it first when replicas share it)."""

    def __init__(
        self,
        block_limit: int | None = defaults.BLOCK_LIMIT,
        probe_categories: frozenset[str] = defaults.PROBE_CATEGORIES,
        max_conversations: int = defaults.MAX_RESPONSES,
        ttl_s: float = defaults.STATE_TTL_S,
        backend: StateBackend | None = None,
    ) -> None:
        self.block_limit = block_limit
        self.probe_categories = probe_categories
        bounds: dict[str, Any] = {
            "max_entries": max_conversations,
            "max_bytes": max_conversations * _ENTRY_BYTES,
            "ttl_s": ttl_s,
            "size": lambda _: _ENTRY_BYTES,
            "backend": backend,
            "fresh": True,
        }
        self._flags: StateMap[tuple[str, str], frozenset[str]] = StateMap(
            "lockout/flags",
            encode=lambda v: json.dumps(sorted(v)),
            decode=lambda text: frozenset(json.loads(text)),
            **bounds,
        )
        self._blocked: StateMap[tuple[str, str], tuple[int, frozenset[str]]] = StateMap(
            "lockout/blocked",
            encode=lambda v: json.dumps([v[0], sorted(v[1])]),
            decode=_decode_blocked,
            **bounds,
        )

    def flagged(self, tenant: str, conversation_id: str) -> frozenset[str]:
        """Categories flagged earlier in the conversation (refused when their action is block)."""
        return self._flags.get((tenant, conversation_id)) or frozenset()

    def mark(self, tenant: str, conversation_id: str, categories: Sequence[str]) -> None:
        key = (tenant, conversation_id)
        self._flags.put(key, (self._flags.get(key) or frozenset()) | set(categories))

    def count_blocked_turn(
        self, tenant: str, conversation_id: str, categories: Sequence[str]
    ) -> list[str] | None:
        """Count a turn blocked on its own content in `categories`.

        Returns every category the conversation's blocked turns named, exactly once: on
        the turn that reaches `block_limit` (the conversation is then refused); else None.
        """
        probing = [c for c in categories if c in self.probe_categories]
        if self.block_limit is None or not probing:
            return None
        key = (tenant, conversation_id)
        count, seen = self._blocked.get(key) or (0, frozenset())
        count, seen = count + 1, seen | set(probing)
        self._blocked.put(key, (count, seen))
        if count != self.block_limit:
            return None
        self.mark(tenant, conversation_id, sorted(seen))
        return sorted(seen)


def _decode_blocked(text: str) -> tuple[int, frozenset[str]]:
    count, seen = json.loads(text)
    return int(count), frozenset(seen)

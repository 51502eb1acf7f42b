"""What the benchmark measures: its configuration, and one turn measured three ways."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

PIPELINE = "pipeline"  # wall time of the whole pipeline call, overhead included
TOTAL = "total"  # sum of the classifiers' own times
FULL_EVERY_TURNS = 200  # full mode is measured at every turn up to this many turns
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to measure. `transcript` replaces the synthetic rollouts when set."""

    turns: int = 200
    tool_tokens: int = 1000
    conversations: int = 1
    seed: int = 0
    full_every: int | None = None  # None: every turn up to 200 turns, sparser beyond
    transcript: Path | None = None
    ratio_turn: int = 190  # where the full/delta ratio is reported
    warmup_turns: int = 5
    clock: str = "wall"  # "wall" (latency) or "cpu" (process CPU time): see CLOCKS

    def stride(self, longest: int) -> int:
        """Full mode is measured at turns where index % stride == 0 (and the last)."""
        if self.full_every is not None:
            return max(1, self.full_every)
        return max(1, math.ceil(longest / FULL_EVERY_TURNS))


@dataclass(slots=True)
class TurnSample:
    """One conversation's turn, measured three ways (latency in ms, per name)."""

    conversation: str
    index: int
    delta_ms: dict[str, float]  # classifiers, TOTAL, PIPELINE
    floor_ms: dict[str, float]  # classifiers, TOTAL
    delta_tokens: dict[str, int]  # per classifier
    new_tokens: int  # tokens of the turn's new items (no context window)
    output_ms: float  # post-inference fold of the turn's output (not on the request path)
    full_ms: dict[str, float] | None = None
    full_tokens: dict[str, int] | None = None
    mismatch: bool = False  # delta and full verdicts differ (must never happen)

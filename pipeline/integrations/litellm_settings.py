"""The LiteLLM guardrail's own configuration keys, validated (framework-free)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from deltaguard import defaults
from deltaguard.classifiers.registry import DEFAULT_NAMES
from deltaguard.lanes.stage import StageConfig
from deltaguard.state.store import StoreLimits


class DeltaGuardSettings(BaseModel):
    """DeltaGuard's keys in the guardrail's `litellm_params` (LiteLLM's own are ignored)."""

    model_config = ConfigDict(extra="ignore")

    flags_path: Path | None = None  # JSONL of flag events; in memory only when unset
    billing_path: Path | None = None  # JSONL of billing events; in memory only when unset
    spool_path: Path | None = None  # events still undelivered at shutdown are appended here
    # Flagged conversations recorded to this SQLite file (as `deltaguard serve --record`),
    # secrets and PII redacted; replayable with `deltaguard replay --from-store`.
    record_path: Path | None = None
    classifiers: list[str] = Field(default_factory=lambda: list(DEFAULT_NAMES))
    monitor: list[str] = Field(default_factory=list)  # classifiers run during the call
    thresholds: dict[str, float] = Field(default_factory=dict)  # category -> threshold
    tenant_by: Literal["key", "team", "none"] = "key"  # whose conversations are kept apart
    inference_threads: int = Field(defaults.INFERENCE_THREADS, ge=1)
    max_responses: int = Field(defaults.MAX_RESPONSES, ge=1)
    max_snapshots: int = Field(defaults.MAX_SNAPSHOTS, ge=1)
    ttl_s: float = Field(defaults.STATE_TTL_S, gt=0)
    item_cache_size: int = Field(200_000, ge=1)  # parsed history items kept for resent histories
    drain_timeout_s: float = Field(defaults.DRAIN_TIMEOUT_S, ge=0)
    fsync: bool = True
    response_headers: bool = True

    def stage_config(self) -> StageConfig:
        return StageConfig(
            inference_threads=self.inference_threads,
            drain_timeout_s=self.drain_timeout_s,
            store=StoreLimits(self.max_responses, self.max_snapshots, self.ttl_s),
        )

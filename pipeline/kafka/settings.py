"""Every setting of the Kafka path in one pydantic model.

One `KafkaSettings` is shared by the publisher (`KafkaEventSink`), the flag
subscriber (`FlagSubscriber`), the topic admin (`ensure_topics`) and the faust
worker, so topic names and partition counts can never disagree between them.

Load it from code, or from a JSON file (`KafkaSettings.from_file`, the worker's
`--config`); the command line's `--broker` overrides the file.

>>> s = KafkaSettings(broker="kafka://127.0.0.1:19092")
>>> s.bootstrap_servers
'127.0.0.1:19092'
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class KafkaSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- broker -----------------------------------------------------------------------
    broker: str = Field("kafka://127.0.0.1:9092", description="kafka://HOST:PORT[;kafka://HOST:PORT...]")
    client_id: str = "deltaguard"
    request_timeout_s: float = Field(10.0, gt=0, description="one broker request, and one send's delivery")

    # -- topics (docs/contract.md section 5) ------------------------------------------------
    turns_topic: str = "deltaguard.turns"
    flags_topic: str = "deltaguard.flags"
    billing_topic: str = "deltaguard.billing"
    errors_topic: str = Field(
        "deltaguard.errors", description="turns the worker could not score (dead letters with a reason)"
    )
    verdicts_topic: str = Field(
        "deltaguard.verdicts", description="a verdict per turn a gateway holds (TurnEvent.verdict_requested)"
    )
    # Turns are keyed by conversation id and each partition's worker owns the state of
    # its conversations, so `turns_partitions` caps how many workers share the load;
    # the table's changelog gets the same count (co-partitioned, faust requires it).
    # Changing it after the fact moves conversations between partitions: their state
    # is then not found (previous_response_not_found), so size it for growth.
    turns_partitions: int = Field(8, ge=1)
    flags_partitions: int = Field(4, ge=1)
    billing_partitions: int = Field(4, ge=1)
    errors_partitions: int = Field(1, ge=1)
    verdicts_partitions: int = Field(4, ge=1)
    replication_factor: int = Field(1, ge=1)
    create_topics: bool = Field(
        True, description="create missing topics at start (and after a broker comes back empty)"
    )

    # -- worker (faust) ----------------------------------------------------------------
    app_id: str = Field("deltaguard-monitor", description="faust app id: consumer group, changelog prefix")
    table_name: str = "conversations"
    batch_size: int = Field(64, ge=1, description="turns per stream.take batch")
    batch_within_s: float = Field(0.02, gt=0, description="longest wait to fill a batch")
    max_responses_per_conversation: int = Field(
        8, ge=1, description="snapshots kept per conversation (recent response ids: forks)"
    )
    max_seen_per_conversation: int = Field(
        256, ge=1, description="recent response ids remembered to drop redelivered turns"
    )
    conversation_ttl_s: float = Field(24 * 3600.0, gt=0, description="idle conversations are dropped")
    sweep_interval_s: float = Field(300.0, gt=0, description="how often idle conversations are swept")
    stats_interval_s: float = Field(60.0, gt=0, description="how often the worker logs its counters")
    fetch_max_wait_ms: int = Field(
        100, ge=0, le=30_000, description="consumer fetch wait (faust hard-codes 1500 ms; see worker.py)"
    )
    session_timeout_s: float = Field(30.0, gt=0)
    commit_interval_s: float = Field(
        1.0, gt=0, description="how often processed offsets are committed (less to redo after a failure)"
    )
    heartbeat_interval_s: float = Field(3.0, gt=0)
    # Producer batch size in bytes, for the workers (faust) and the gateway's publisher.
    # 1 = one record per batch: needed against tansu, whose ListOffsets is wrong after
    # multi-record batches (docs/kafka.md).
    producer_max_batch_size: int | None = Field(None, ge=1)
    stream_buffer_maxsize: int = Field(1024, ge=1)
    data_dir: Path | None = Field(None, description="faust data dir; default: a fresh temporary directory")
    web_enabled: bool = False
    web_port: int = Field(6066, ge=1, le=65535, description="bound to 127.0.0.1 when enabled")
    inference_threads: int = Field(1, ge=1, description="threads for classifier folds (off the event loop)")

    # -- publisher (KafkaEventSink) ------------------------------------------------------
    spool_path: Path = Path("deltaguard-spool.jsonl")
    spool_max_bytes: int = Field(64 * 1024 * 1024, ge=1024)
    spool_fsync: bool = Field(False, description="fsync every spool append (slower; survives power loss)")
    publish_queue_size: int = Field(10_000, ge=1, description="in-memory events before spilling to spool")
    linger_ms: int = Field(5, ge=0)
    reconnect_initial_s: float = Field(0.2, gt=0)
    reconnect_max_s: float = Field(5.0, gt=0)
    close_timeout_s: float = Field(10.0, ge=0, description="shutdown: time to flush before spooling")

    # -- flag subscriber -----------------------------------------------------------------
    # Every gateway instance reads every flag (no consumer group): where the flags of
    # the subscriber start when it starts.
    subscriber_offset_reset: str = Field("latest", pattern="^(latest|earliest)$")
    dedupe_window: int = Field(100_000, ge=1, description="event ids remembered to drop duplicates")

    # -- verdict before release (docs/distributed.md) -----------------------------------
    # A turn with untrusted input has its tool calls held until the worker's verdict comes
    # back on `verdicts_topic`. Past `verdict_timeout_s` after the turn was published, the
    # fallback applies: "release" (the call goes out, logged; the worker's flag, once it
    # comes, blocks the next turn) or "block" (the turn fails as if its input were an
    # injection). Keep it below the gateway's `release_hold_timeout_s`, which releases
    # whatever waits longer.
    verdict_timeout_s: float = Field(10.0, gt=0, description="longest wait for a held turn's verdict")
    verdict_fallback: Literal["release", "block"] = Field(
        "release", description="what a held turn gets past the deadline, or when its worker failed on it"
    )

    @field_validator("broker")
    @classmethod
    def _check_broker(cls, value: str) -> str:
        for url in value.split(";"):
            parts = urlsplit(url.strip())
            if parts.scheme != "kafka" or not parts.hostname or not parts.port:
                raise ValueError(f"expected kafka://HOST:PORT, got {url!r}")
        return value

    @model_validator(mode="after")
    def _check_topics(self) -> KafkaSettings:
        # One topic per kind of record: the subscriber and the worker tell them apart by topic.
        names = [
            self.turns_topic,
            self.flags_topic,
            self.billing_topic,
            self.errors_topic,
            self.verdicts_topic,
        ]
        names.append(self.changelog_topic)
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(
                    f"topic {name!r} is named twice: every kind of record needs a topic of its own"
                )
        return self

    @property
    def bootstrap_servers(self) -> str:
        """The broker list as aiokafka wants it: `host:port,host:port`."""
        hosts = []
        for url in self.broker.split(";"):
            parts = urlsplit(url.strip())
            hosts.append(f"{parts.hostname}:{parts.port}")
        return ",".join(hosts)

    @property
    def changelog_topic(self) -> str:
        """The faust table's changelog (faust names it `<app id>-<table>-changelog`)."""
        return f"{self.app_id}-{self.table_name}-changelog"

    def topic_partitions(self) -> dict[str, int]:
        """Every topic DeltaGuard uses, with its partition count."""
        return {
            self.turns_topic: self.turns_partitions,
            self.flags_topic: self.flags_partitions,
            self.billing_topic: self.billing_partitions,
            self.errors_topic: self.errors_partitions,
            self.verdicts_topic: self.verdicts_partitions,
            self.changelog_topic: self.turns_partitions,
        }

    @classmethod
    def from_file(cls, path: Path, **overrides: object) -> KafkaSettings:
        """Settings from a JSON file; keyword arguments override its values."""
        data = cls.model_validate_json(path.read_text(encoding="utf-8")).model_dump(exclude_unset=True)
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(data)

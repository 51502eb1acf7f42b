"""DeltaGuard: a streaming safety-classifier pipeline that scores only each turn's delta.

    from deltaguard import SafetyStage, build_scorer, parse_items

    stage = SafetyStage(build_scorer(), monitor=("encoder",))
    await stage.start()
    turn = await stage.begin("acme", new_items=parse_items(new_items), previous_response_id="resp_1")
    if turn.blocked: ...
    await turn.finish(parse_items(output_items), usage)

The package's layers import downward only, bottom to top (`LAYERS`; a test checks every
import of the package against it):

    errors, items, models, defaults,   the exception tree, the hot-path item type, artifacts' home,
      worker                             every default value, the one bounded worker under every
                                         background loop
    parsing, events, artifacts,        wire items to `Item`s, emitted events, hash-checked
      transcripts, usage                 model files, the transcript file format, token usage
    classifiers                        the classifier protocol and the classifiers
    state                              snapshots, the hash chain, the conversation store, policy
    telemetry, sinks                   metrics and tracing; where events go
    lanes                              gate, monitor and post-inference lanes; the safety stage
    recording                          flagged conversations to SQLite (wraps the lanes' flags)
    kafka                              distributed mode: publisher, subscriber, faust worker
    gateway, integrations              the Responses API gateway; LiteLLM
    tools, review, cli                 replay, bench, demo, eval; the review page; the `deltaguard` command

Nothing heavy happens at import: models load when a scorer is built.
"""

from __future__ import annotations

from deltaguard.classifiers.base import CATEGORIES, Classifier, Finding, Update
from deltaguard.errors import (
    DeltaGuardError,
    ItemError,
    LaneClosed,
    ModelArtifactError,
    PolicyError,
    PreviousResponseNotFound,
    SinkFull,
    TranscriptError,
)
from deltaguard.events import BillingEvent, FlagEvent, TurnEvent
from deltaguard.items import Item, count_tokens
from deltaguard.lanes.monitor import MonitorStep
from deltaguard.lanes.stage import GateResult, SafetyStage, StageConfig, Turn
from deltaguard.parsing import parse_item, parse_items
from deltaguard.sinks import EventSink, JsonlSink, MemorySink
from deltaguard.state.loading import build_scorer
from deltaguard.state.policy import CategoryPolicy, Policy, load_policy
from deltaguard.state.scoring import Scorer, Snapshot, TurnVerdict
from deltaguard.state.store import ConversationStore, ConversationTracker, StoreLimits
from deltaguard.usage import Usage

__version__ = "0.1.0"

__all__ = [
    "CATEGORIES",
    "BillingEvent",
    "CategoryPolicy",
    "Classifier",
    "ConversationStore",
    "ConversationTracker",
    "DeltaGuardError",
    "EventSink",
    "Finding",
    "FlagEvent",
    "GateResult",
    "Item",
    "ItemError",
    "JsonlSink",
    "LaneClosed",
    "MemorySink",
    "ModelArtifactError",
    "MonitorStep",
    "Policy",
    "PolicyError",
    "PreviousResponseNotFound",
    "SafetyStage",
    "Scorer",
    "SinkFull",
    "Snapshot",
    "StageConfig",
    "StoreLimits",
    "TranscriptError",
    "Turn",
    "TurnEvent",
    "TurnVerdict",
    "Update",
    "Usage",
    "__version__",
    "build_scorer",
    "count_tokens",
    "load_policy",
    "parse_item",
    "parse_items",
]

# The layering rule, bottom to top: a module may import its own layer and those below it.
# Keys are the first name under `deltaguard` (`deltaguard.state.store` -> "state").
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "items", "models", "defaults", "worker"}),
    frozenset({"parsing", "events", "artifacts", "transcripts", "usage"}),
    frozenset({"classifiers"}),
    frozenset({"state"}),
    frozenset({"telemetry", "sinks"}),
    frozenset({"lanes"}),
    frozenset({"recording"}),
    frozenset({"kafka"}),
    frozenset({"gateway", "integrations"}),
    frozenset({"tools", "review", "cli", "__main__"}),
)

"""DeltaGuard: a streaming safety-classifier pipeline that scores only each turn's delta.

    from deltaguard import SafetyStage, build_scorer, parse_items

    stage = SafetyStage(build_scorer(), monitor=("encoder",))
    await stage.start()
    turn = await stage.begin("acme", new_items=parse_items(new_items), previous_response_id="resp_1")
    if turn.blocked: ...
    await turn.finish(parse_items(output_items), usage)

The package's layers import downward only, bottom to top (`LAYERS`: every top-level
module and folder of the package in exactly one layer). Inside a layer, one name may
import another only where `LAYER_EDGES` says the graph needs it, so the adapters, the
review page and the tools stay side by side rather than stacked (a test checks every
import of the package against both):

    errors, items, models, defaults,   the exception tree, the hot-path item type, artifacts' home,
      worker, bounds                     every default value, the one bounded worker under every
                                         background loop, how much a request may hold and nest
    parsing, events, artifacts,        wire items to `Item`s, emitted events, hash-checked
      transcripts, usage, tenants,       model files, the transcript file format, token usage,
      access, serving                    tenant API keys, Host and Origin allow-lists, read
                                         deadlines on uvicorn's connections
    classifiers                        the classifier protocol and the classifiers
    state                              snapshots, the hash chain, the conversation store, policy
    chat_items                         Chat Completions and Responses histories to `Item`s,
                                         canonically, with a bounded cache of parsed items
    telemetry, sinks, journal          metrics and tracing; where events go; billing kept
                                         on disk until its sink has it
    lanes                              gate, monitor and post-inference lanes; the safety stage
    recording                          flagged conversations to SQLite, and their review labels
    kafka                              distributed mode: publisher, subscriber, faust worker
    gateway, integrations, review,     the Responses API gateway; LiteLLM; the review page;
      tools                              replay, bench, demo, eval (the demo runs the gateway)
    cli                                the `deltaguard` command

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
    TurnBlocked,
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
from deltaguard.state.store import ConversationStore, StoreLimits
from deltaguard.state.tracker import ConversationTracker
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
    "TurnBlocked",
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

# The layering rule, bottom to top: a module may import the layers below its own, and
# another name of its own layer only along an edge of `LAYER_EDGES`. Keys are the first
# name under `deltaguard` (`deltaguard.state.store` -> "state").
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"errors", "items", "models", "defaults", "worker", "bounds", "streams"}),
    frozenset({"parsing", "events", "artifacts", "transcripts", "usage", "tenants", "access", "serving"}),
    frozenset({"classifiers"}),
    frozenset({"state"}),
    frozenset({"chat_items"}),
    frozenset({"telemetry", "sinks", "journal"}),
    frozenset({"lanes"}),
    frozenset({"recording"}),
    frozenset({"kafka"}),
    frozenset({"gateway", "integrations", "review", "tools"}),
    frozenset({"cli", "__main__"}),
)

# The same-layer imports the graph needs, (importer, imported); every other one is refused
# (the review page, the tools and LiteLLM never reach into the gateway's modules, nor the
# gateway into theirs; the demo and gateway_thread are the tools that run the gateway).
LAYER_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        ("worker", "errors"),
        ("bounds", "defaults"),
        ("transcripts", "parsing"),
        ("tenants", "events"),
        ("tools", "gateway"),
        ("__main__", "cli"),
    }
)

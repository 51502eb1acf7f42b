"""The default classifier set, loaded once at startup.

Model-backed classifiers are wrapped in `ThresholdScaled` with the thresholds their
manifest entry records, so that every classifier's threshold is 0.5 (classifiers/scaled.py).

One lexical model serves three views, and each item role is judged by exactly one of them:

    lexical        per item, at the model's per-message threshold: tool outputs (an
                   injection in a web page or a file is judged where it arrives);
    conversation   user messages, at a threshold calibrated per *conversation*
                   (classifiers/conversation.py): a ~1% per-message false-positive rate
                   would flag ~7% of ordinary 35-turn chats, and a flagged conversation
                   stays flagged.
    definitions    tool definitions (role "definitions"), prompt_injection only, at the
                   threshold of the "tool-definitions" manifest entry (classifiers/definitions.py).
    operator       what the client writes for the model: system and developer messages,
                   `instructions` and assistant messages it sends (forged turns),
                   jailbreak only (classifiers/operator.py): explicit overrides of the
                   model's rules, each judged by both heads at their thresholds; an
                   operator's prompt is not an attack, an override of the model's rules is.

With `conversation` left out, `lexical` judges user messages itself, per message.

`harm` (classifiers/harm.py, manifest entry "harm") scores toxicity and the finer harm
categories of user requests and of the model's own output, in the gate lane.

`detector`, the MiniLM student fine-tuned for prompt injection, jailbreak and injections
through tools (manifest entry "detector", classifiers/encoder.py), runs in the monitor
lane: beside inference, its flags enforced from the next turn on. It judges user messages
with its direct head and tool outputs with its indirect head; system and developer
messages, the operator's own instructions, it leaves alone: its jailbreak head flags
ordinary operator prompts (the Codex CLI's own scores 0.999), so those channels are the
`operator` view's.
Its screen, lexical-v3, clears the items it is sure of before the detector runs
(training/detector_screen.py); it shares the `lexical` view's loaded model.

`directives` (classifiers/directives.py) reads tool outputs and attached files for notes
that speak to an AI reader and ask for what its user would not want (a secret disclosed,
a fetched script run, a safeguard dropped, the user kept in the dark, the user's task
dropped), by rules rather than a model: the models miss such instructions phrased in words
their training rows do not use. It runs beside the detector, in the monitor lane.

`notes` (classifiers/notes.py, manifest entry "notes") reads the same content with a
model: all six layers of MiniLM fine-tuned to judge one paragraph that asks something, an
instruction planted for the model or not, trained on notes that separate authors wrote for
coding agents. It finds what the rules' words do not name, beside them in the monitor lane.

`provenance` (classifiers/provenance.py) scores nothing: it keeps the sketch of which
strings the conversation's principals named and which untrusted content told the model
to use, which the gateway's action check reads before it releases a tool call
(pipeline/lanes/provenance.py). Its lane is "actions", not the gate: only the model's
actions need the sketch, so a stage folds it beside inference (a job of its own on the
inference pool once the turn is gated, awaited only when a tool call arrives) and no
request waits for it. Tools that fold the whole set themselves (replay, bench, the Kafka
worker when named) fold it with the rest, as before.

The two views name their manifest entries: `lexical` serves LEXICAL_ARTIFACT, and
`conversation` CONVERSATION_ARTIFACT, the model its span and EMA thresholds were
calibrated on (eval/conversation_eval.py). When both name the same entry, the model is
loaded once.
"""

from __future__ import annotations

from pathlib import Path

from deltaguard.artifacts import manifest_entry
from deltaguard.classifiers.base import Classifier
from deltaguard.classifiers.conversation import SCORED_ROLES as CONVERSATION_ROLES
from deltaguard.classifiers.conversation import ConversationClassifier
from deltaguard.classifiers.definitions import DefinitionsClassifier
from deltaguard.classifiers.directives import DirectivesClassifier
from deltaguard.classifiers.encoder import EncoderClassifier
from deltaguard.classifiers.harm import HarmClassifier
from deltaguard.classifiers.lexical import SCORED_ROLES as LEXICAL_ROLES
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.notes import NotesClassifier
from deltaguard.classifiers.operator import OperatorClassifier
from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.provenance import ProvenanceClassifier
from deltaguard.classifiers.scaled import ThresholdScaled
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.models import MODELS_DIR

DEFAULT_NAMES = (
    "secrets",
    "pii",
    "lexical",
    "conversation",
    "definitions",
    "operator",
    "harm",
    "detector",
    "directives",
    "notes",
    "provenance",
)
LEXICAL_ARTIFACT = "lexical"
CONVERSATION_ARTIFACT = "lexical-v9"  # training.train_lexical --version 9: every chitchat message
DEFINITIONS_ARTIFACT = "lexical-v2"  # the artifact its threshold was chosen for (the entry names it)
# User messages this long are pasted references or whole jailbreak prompts: the `lexical`
# view (trained on real pasted text) judges them alone, the `conversation` view the rest
# (its model reads long benign documents as jailbreaks; split attacks come in shorter
# messages), and the detector reads them with its heads for untrusted content (an
# instruction inside a pasted document is not the user's own).
LONG_USER_CHARS = 2000
OPERATOR_ARTIFACT = "lexical-v3"  # the model and thresholds the operator view was measured with
# Opt-in: the frozen encoder (~10-40 ms of CPU per 256-token window; `--classifiers ...,encoder`).
KNOWN_NAMES = (*DEFAULT_NAMES, "encoder")


def load_classifiers(
    names: tuple[str, ...] = DEFAULT_NAMES, models_dir: Path = MODELS_DIR
) -> list[Classifier]:
    """Build and load the named classifiers; artifact problems raise `ModelArtifactError`."""
    unknown = [n for n in names if n not in KNOWN_NAMES]
    if unknown:
        raise ValueError(f"unknown classifier {unknown[0]!r}; known: {', '.join(KNOWN_NAMES)}")
    # Each lexical artifact is loaded once, whichever of its views are named.
    views = (
        (LEXICAL_ARTIFACT, "lexical"),
        (CONVERSATION_ARTIFACT, "conversation"),
        (DEFINITIONS_ARTIFACT, "definitions"),
        (OPERATOR_ARTIFACT, "operator"),
    )
    wanted = {artifact for artifact, view in views if view in names}
    models = {a: LexicalClassifier(models_dir, artifact=a).load() for a in sorted(wanted)}
    out: list[Classifier] = []
    split_users = "lexical" in names and "conversation" in names
    for name in names:
        if name == "secrets":
            out.append(SecretsClassifier())
        elif name == "pii":
            out.append(PiiClassifier())
        elif name == "lexical":
            # beside the conversation view, only the user messages too long for it
            min_chars = {role: LONG_USER_CHARS for role in CONVERSATION_ROLES} if split_users else {}
            view = LexicalClassifier(
                models_dir, roles=LEXICAL_ROLES, artifact=LEXICAL_ARTIFACT, min_chars=min_chars
            )
            view.share(models[LEXICAL_ARTIFACT])
            out.append(ThresholdScaled(view, model_thresholds(LEXICAL_ARTIFACT, models_dir)))
        elif name == "conversation":
            lexical = models[CONVERSATION_ARTIFACT]
            max_chars = LONG_USER_CHARS if split_users else None
            params = conversation_view(models_dir)
            view = ConversationClassifier(models_dir, lexical=lexical, max_chars=max_chars, **params)
            out.append(view.load())  # 0.5-scaled already
        elif name == "definitions":
            lexical = models[DEFINITIONS_ARTIFACT]
            out.append(DefinitionsClassifier(models_dir, lexical=lexical).load())  # 0.5-scaled already
        elif name == "operator":
            lexical = models[OPERATOR_ARTIFACT]
            out.append(OperatorClassifier(models_dir, lexical=lexical).load())  # 0.5-scaled already
        elif name == "harm":
            out.append(HarmClassifier(models_dir).load())  # 0.5-scaled already
        elif name == "directives":
            out.append(DirectivesClassifier())
        elif name == "notes":
            notes = NotesClassifier(models_dir).load()
            out.append(ThresholdScaled(notes, {"prompt_injection": notes.threshold}))
        elif name == "provenance":
            out.append(ProvenanceClassifier())
        elif name in ("encoder", "detector"):
            # 0.5-scaled already; a screen shares the lexical model loaded above
            out.append(
                EncoderClassifier(
                    models_dir, artifact=name, lexical=models, long_user_chars=LONG_USER_CHARS
                ).load()
            )
    return out


def conversation_view(models_dir: Path = MODELS_DIR) -> dict[str, float]:
    """The conversation view's thresholds chosen on real traffic (manifest entry
    "conversation-view", training/conversation_view.py), where they were chosen for the
    model it serves; none: the module's defaults."""
    from deltaguard.artifacts import load_manifest

    entry = load_manifest(models_dir).get("models", {}).get("conversation-view")
    if not entry or entry.get("model") != CONVERSATION_ARTIFACT:
        return {}
    return {"span_threshold": float(entry["span_threshold"]), "ema_threshold": float(entry["ema_threshold"])}


def parse_names(text: str) -> tuple[str, ...]:
    """A command line's comma-separated classifier names ("secrets, pii,lexical")."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def model_thresholds(name: str, models_dir: Path = MODELS_DIR) -> dict[str, float]:
    """The thresholds chosen on validation data for manifest entry `name`."""
    return dict(manifest_entry(name, models_dir).get("thresholds", {}))

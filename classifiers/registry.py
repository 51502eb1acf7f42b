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

With `conversation` left out, `lexical` judges user messages itself, per message.
"""

from __future__ import annotations

from pathlib import Path

from deltaguard.artifacts import manifest_entry
from deltaguard.classifiers.base import Classifier
from deltaguard.classifiers.conversation import SCORED_ROLES as CONVERSATION_ROLES
from deltaguard.classifiers.conversation import ConversationClassifier
from deltaguard.classifiers.definitions import DefinitionsClassifier
from deltaguard.classifiers.encoder import EncoderClassifier
from deltaguard.classifiers.lexical import SCORED_ROLES as LEXICAL_ROLES
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.scaled import ThresholdScaled
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.models import MODELS_DIR

DEFAULT_NAMES = ("secrets", "pii", "lexical", "conversation", "definitions")
# Opt-in: the encoder (~10-40 ms of CPU per 256-token window; `serve --monitor encoder`).
KNOWN_NAMES = (*DEFAULT_NAMES, "encoder")


def load_classifiers(
    names: tuple[str, ...] = DEFAULT_NAMES, models_dir: Path = MODELS_DIR
) -> list[Classifier]:
    """Build and load the named classifiers; artifact problems raise `ModelArtifactError`."""
    unknown = [n for n in names if n not in KNOWN_NAMES]
    if unknown:
        raise ValueError(f"unknown classifier {unknown[0]!r}; known: {', '.join(KNOWN_NAMES)}")
    # The lexical model is loaded once, whichever of its views are named.
    views = {"lexical", "conversation", "definitions"}
    model = LexicalClassifier(models_dir).load() if views & set(names) else None
    out: list[Classifier] = []
    for name in names:
        if name == "secrets":
            out.append(SecretsClassifier())
        elif name == "pii":
            out.append(PiiClassifier())
        elif name == "lexical":
            roles = LEXICAL_ROLES - CONVERSATION_ROLES if "conversation" in names else LEXICAL_ROLES
            view = LexicalClassifier(models_dir, roles=roles).share(model)
            out.append(ThresholdScaled(view, model_thresholds(name, models_dir)))
        elif name == "conversation":
            out.append(ConversationClassifier(models_dir, lexical=model).load())  # 0.5-scaled already
        elif name == "definitions":
            # Shares `model` when it is the artifact its threshold was chosen for.
            out.append(DefinitionsClassifier(models_dir, lexical=model).load())  # 0.5-scaled already
        elif name == "encoder":
            encoder = EncoderClassifier(models_dir).load()
            out.append(ThresholdScaled(encoder, encoder.thresholds))
    return out


def parse_names(text: str) -> tuple[str, ...]:
    """A command line's comma-separated classifier names ("secrets, pii,lexical")."""
    return tuple(n.strip() for n in text.split(",") if n.strip())


def model_thresholds(name: str, models_dir: Path = MODELS_DIR) -> dict[str, float]:
    """The thresholds chosen on validation data for manifest entry `name`."""
    return dict(manifest_entry(name, models_dir).get("thresholds", {}))

"""The default classifier set, loaded once at startup.

Model-backed classifiers are wrapped in `ThresholdScaled` with the thresholds their
manifest entry records, so that every classifier's threshold is 0.5 (classifiers/scaled.py).
"""

from __future__ import annotations

from pathlib import Path

from classifiers.base import Classifier
from classifiers.conversation import ConversationClassifier
from classifiers.encoder import EncoderClassifier
from classifiers.lexical import LexicalClassifier
from classifiers.pii import PiiClassifier
from classifiers.scaled import ThresholdScaled
from classifiers.secrets import SecretsClassifier
from models import MODELS_DIR
from pipeline.artifacts import manifest_entry

DEFAULT_NAMES = ("secrets", "pii", "lexical")
# Opt-in: the conversation-level classifier (multi-turn attacks; see its docstring for why
# it is not a default yet) and the encoder (~10-40 ms of CPU per 256-token window).
KNOWN_NAMES = (*DEFAULT_NAMES, "conversation", "encoder")


def load_classifiers(
    names: tuple[str, ...] = DEFAULT_NAMES, models_dir: Path = MODELS_DIR
) -> list[Classifier]:
    """Build and load the named classifiers; artifact problems raise `ModelArtifactError`."""
    out: list[Classifier] = []
    for name in names:
        if name == "secrets":
            out.append(SecretsClassifier())
        elif name == "pii":
            out.append(PiiClassifier())
        elif name == "lexical":
            out.append(
                ThresholdScaled(LexicalClassifier(models_dir).load(), model_thresholds(name, models_dir))
            )
        elif name == "conversation":
            # Shares the lexical model when it is loaded too; its scores are 0.5-scaled already.
            lexical = next(
                (c.inner for c in out if isinstance(c, ThresholdScaled) and c.name == "lexical"), None
            )
            out.append(ConversationClassifier(models_dir, lexical=lexical).load())
        elif name == "encoder":
            encoder = EncoderClassifier(models_dir).load()
            out.append(ThresholdScaled(encoder, encoder.thresholds))
        else:
            raise ValueError(f"unknown classifier {name!r}; known: {', '.join(KNOWN_NAMES)}")
    return out


def model_thresholds(name: str, models_dir: Path = MODELS_DIR) -> dict[str, float]:
    """The thresholds chosen on validation data for manifest entry `name`."""
    return dict(manifest_entry(name, models_dir).get("thresholds", {}))

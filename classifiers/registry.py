"""The default classifier set, loaded once at startup."""

from __future__ import annotations

from pathlib import Path

from classifiers.base import Classifier
from classifiers.lexical import LexicalClassifier
from classifiers.pii import PiiClassifier
from classifiers.secrets import SecretsClassifier
from models import MODELS_DIR

DEFAULT_NAMES = ("secrets", "pii", "lexical")


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
            out.append(LexicalClassifier(models_dir).load())
        else:
            raise ValueError(f"unknown classifier {name!r}; known: {', '.join(DEFAULT_NAMES)}")
    return out

"""A recipe's last step: write the manifest entry, then check the served classifier.

`publish(models_dir, write, serve)` writes the entry (`write()`), loads the classifier the
way the pipeline serves it (`serve()`, through the new entry) and runs every conformance
check of deltaguard.classifiers.checks on it; a classifier that breaks a rule puts the
manifest back as it was and the recipe fails, naming the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from deltaguard.artifacts import MANIFEST_NAME
from deltaguard.classifiers import checks
from deltaguard.classifiers.base import Classifier


def publish(models_dir: Path, write: Callable[[], None], serve: Callable[[], Classifier]) -> None:
    path = Path(models_dir) / MANIFEST_NAME
    before = path.read_text(encoding="utf-8")
    write()
    try:
        checks.check_classifier(serve())
    except checks.ConformanceError:
        path.write_text(before, encoding="utf-8")
        raise

"""A recipe's last step: write the manifest entry, then check the served classifier.

`publish(models_dir, write, serve)` writes the entry (`write()`), loads the classifier the
way the pipeline serves it (`serve()`, through the new entry; one classifier or several)
and runs every conformance check of deltaguard.classifiers.checks on it; a classifier that
breaks a rule puts the manifest back as it was and the recipe fails, naming the rule.

`publish_entry` is the common case: one entry through training/lib/manifest.py, checked on
the views of the default set that serve it, built by classifiers/registry.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from deltaguard.artifacts import MANIFEST_NAME
from deltaguard.classifiers import checks
from deltaguard.classifiers.base import Classifier
from training.lib.manifest import write_manifest_entry


def publish(
    models_dir: Path, write: Callable[[], None], serve: Callable[[], Classifier | Sequence[Classifier]]
) -> None:
    path = Path(models_dir) / MANIFEST_NAME
    before = path.read_text(encoding="utf-8")
    write()
    try:
        served = serve()
        for clf in served if isinstance(served, (list, tuple)) else [served]:
            checks.check_classifier(clf)
    except checks.ConformanceError:
        path.write_text(before, encoding="utf-8")
        raise


def publish_entry(entry: dict, name: str, views: Sequence[str], models_dir: Path) -> None:
    """publish `models[name] = entry`, checked on each of `views` (names of
    classifiers/registry.py) as the pipeline loads it from `models_dir`."""
    from deltaguard.classifiers.registry import load_classifiers

    publish(
        models_dir,
        lambda: write_manifest_entry(entry, name, models_dir),
        lambda: load_classifiers(tuple(views), models_dir),
    )

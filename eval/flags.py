"""Which classifiers flag an item read alone: the probes' shared verdict (eval/coding_probe.py,
eval/coding_notes.py, eval/obfuscation.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from deltaguard.classifiers.base import Classifier
from deltaguard.classifiers.registry import load_classifiers
from deltaguard.items import Item


def probed(names: Sequence[str], models_dir: Path) -> dict[str, Classifier]:
    """The named classifiers of the default set, loaded as the pipeline loads them (the
    views share their models and settings with the rest of the set)."""
    loaded = {c.name: c for c in load_classifiers(models_dir=models_dir)}
    return {name: loaded[name] for name in names}


def flags(classifiers: dict[str, Classifier], items: list[Item]) -> dict[str, list[bool]]:
    """Per classifier name, whether it flags prompt_injection on each item, each scored from
    an empty state; and under "pipeline", whether any of them does."""
    out = {}
    for name, clf in classifiers.items():
        rows = [clf.update(clf.initial_state(), [item]).item_scores[0] for item in items]
        out[name] = [r.get("prompt_injection", 0.0) >= 0.5 for r in rows]
    out["pipeline"] = [any(col) for col in zip(*out.values(), strict=True)]
    return out

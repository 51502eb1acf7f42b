"""A benchmark run's samples, and their JSON report (`BenchResult.to_json`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deltaguard.tools.bench.samples import BenchConfig, TurnSample
from deltaguard.tools.bench.summary import SUMMARY_DOC, environment, per_classifier, per_turn, summarize


@dataclass
class BenchResult:
    """Every measured turn of a run, the classifiers' versions and the transcript's bad lines."""

    config: BenchConfig
    classifiers: dict[str, str]
    samples: list[TurnSample] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        names = list(self.classifiers)
        turns = per_turn(self.samples, names)
        return {
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self.config).items()},
            "environment": environment(),
            "classifiers": self.classifiers,
            "summary": summarize(self, turns),
            "summary_doc": SUMMARY_DOC,
            "per_classifier": per_classifier(self.samples, names),
            "turns": turns,
            "errors": self.errors,
        }

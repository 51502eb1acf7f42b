"""The real text the shipped models and the benign-traffic evaluation were built from, pinned.

training/lib/real_text.py reads what this machine holds: repository snapshots brought by
`fetch` (a later fetch brings a newer HEAD), the Debian documents of the installed
packages, a wheel. When any of them moves, the splits still hold whole sources, but the
documents inside them change, and with them every row, mined window and evaluation
conversation built from them, silently. The lock records, per source, how many documents
it gave and a digest of their names and texts; `drift` says which sources no longer match,
so a recipe or an evaluation run on another machine says so instead of quietly measuring
other text.

    python -m training.lib.real_text_lock            # check this machine against the lock
    python -m training.lib.real_text_lock --write    # re-pin (after a deliberate refresh)
    python -m training.lib.real_text_lock --add      # pin new sources, keep the pinned ones

Pinned are real_text.py's documents and the agent files of training/lib/agent_files.py.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from training.lib.real_text import Document

LOCK = Path(__file__).with_name("real_text.lock.json")


def digests(documents: Iterable[Document]) -> dict[str, dict[str, object]]:
    """Per source: its document count and a sha256 over its documents' names and texts, in
    name order (the order documents are read in does not matter)."""
    by_source: dict[str, list[tuple[str, str]]] = {}
    for d in documents:
        by_source.setdefault(d.source, []).append((d.name, d.text))
    out: dict[str, dict[str, object]] = {}
    for source, docs in sorted(by_source.items()):
        h = hashlib.sha256()
        for name, text in sorted(docs):
            h.update(name.encode() + b"\0" + hashlib.sha256(text.encode()).digest())
        out[source] = {"documents": len(docs), "sha256": h.hexdigest()}
    return out


@dataclass(frozen=True)
class Drift:
    """How this machine's real text differs from the lock, by source."""

    missing: tuple[str, ...]  # pinned, absent here (a repository not fetched, a package not installed)
    changed: tuple[str, ...]  # present, with other documents
    added: tuple[str, ...]  # present here, not pinned

    def __bool__(self) -> bool:
        return bool(self.missing or self.changed or self.added)

    def summary(self, limit: int = 5) -> str:
        if not self:
            return "real text: matches the lock"
        parts = []
        for label, sources in (("missing", self.missing), ("changed", self.changed), ("added", self.added)):
            if sources:
                more = f" and {len(sources) - limit} more" if len(sources) > limit else ""
                parts.append(f"{len(sources)} {label} ({', '.join(sources[:limit])}{more})")
        return "real text differs from the lock: " + "; ".join(parts)


def drift(documents: Iterable[Document], lock: Path = LOCK) -> Drift:
    """The sources whose documents differ from `lock`'s."""
    pinned = json.loads(lock.read_text(encoding="utf-8"))["sources"] if lock.exists() else {}
    here = digests(documents)
    return Drift(
        missing=tuple(s for s in pinned if s not in here),
        changed=tuple(s for s in pinned if s in here and here[s] != pinned[s]),
        added=tuple(s for s in here if s not in pinned),
    )


def _machine_documents(documents: Iterable[Document]) -> list[Document]:
    """`documents` (real_text.py's) and this machine's agent files: what the lock pins."""
    from training.lib.agent_files import agent_documents

    return [*documents, *agent_documents()]


def missing_repositories() -> list[str]:
    """The repositories the lock pins that this machine has not fetched (`fetch`, into
    real_text.mirror_dir()): conversations and rows are then built without them, and an
    evaluation measures other text than the one it reports on."""
    return [source.removeprefix("repo:") for source in machine_drift().missing if source.startswith("repo:")]


@functools.cache
def machine_drift() -> Drift:
    """This machine's real text against the lock, computed once per process (a warning on
    stderr when it differs): what `all_documents` and the evaluations report."""
    from training.lib.real_text import _all_documents

    found = drift(_machine_documents(_all_documents(None, None)))
    if found:
        print(f"[real_text] {found.summary()}", file=sys.stderr)
    return found


def write(
    documents: Iterable[Document], lock: Path = LOCK, keep_pinned: bool = False
) -> dict[str, dict[str, object]]:
    """Pin `documents` in `lock`; with `keep_pinned`, a source pinned already keeps its entry
    (new sources join without re-pinning text the shipped models were built from)."""
    pinned = digests(documents)
    if keep_pinned and lock.exists():
        pinned |= json.loads(lock.read_text(encoding="utf-8"))["sources"]
        pinned = dict(sorted(pinned.items()))
    rows = ",\n".join(f"  {json.dumps(s)}: {json.dumps(v, sort_keys=True)}" for s, v in pinned.items())
    about = json.dumps("training/lib/real_text_lock.py")
    lock.write_text(f'{{\n "about": {about},\n "sources": {{\n{rows}\n }}\n}}\n', encoding="utf-8")
    return pinned


def main(argv: list[str] | None = None) -> int:
    from training.lib.real_text import all_documents

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="pin this machine's real text")
    group.add_argument("--add", action="store_true", help="pin sources the lock lacks, keep the rest")
    args = parser.parse_args(argv)
    documents = _machine_documents(all_documents())
    if args.write or args.add:
        pinned = write(documents, keep_pinned=args.add)
        count = sum(int(v["documents"]) for v in pinned.values())
        print(f"pinned {count} documents of {len(pinned)} sources")
        return 0
    found = drift(documents)
    print(found.summary(limit=50))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

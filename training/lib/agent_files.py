"""Files written to instruct agents, as a coding agent reads them.

A repository's own instructions for its agents (skill files, AGENTS.md, rules, agent and
prompt definitions) are imperative, addressed to the model, about tools, secrets and
conduct: the benign text an injection detector confuses most with an injection. The
repositories of real_text.py hold too few of them to measure or learn from.

This module reads public collections of them (real_text.AGENT_FILE_REPOSITORIES, dealt
into train / validation / test as whole repositories by real_text.split_of):
`agent_documents` gives their files, kind "agent_file", which eval/agent_traffic.py's
`agent_files` conversations read. Files that quote an attack outright (a guardrail's
examples, a red-team agent's payloads) are left out: benign text must be benign.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path, PurePosixPath

from training.lib.hard_negatives import QUOTED_ATTACK
from training.lib.real_text import AGENT_FILE_REPOSITORIES, Document, mirror_dir, repo_files

KIND = "agent_file"
PER_REPOSITORY = 600  # files read per repository, at most (a stable sample)
_AGENT_FILE = re.compile(
    r"(^|/)(skill\.md|agents\.md|claude\.md|gemini\.md|copilot-instructions\.md|\.cursorrules)$"
    r"|\.(instructions|prompt|agent|chatmode)\.md$|\.mdc$"
    r"|(^|/)(agents|commands|rules|prompts)/[^/]+\.md$",
    re.I,
)


def agent_file_kind(path: str) -> str | None:
    """KIND for a file that instructs an agent, else None (a collection's READMEs, docs
    and code are read elsewhere, if at all)."""
    name = PurePosixPath(path).name.lower()
    if name.startswith("readme") or not _AGENT_FILE.search(path):
        return None
    return KIND


def agent_documents(root: Path | None = None) -> list[Document]:
    """The agent files of every fetched collection (missing ones skipped), minus those that
    quote an attack. Read once per process (the lock check, the evaluation and a recipe's
    validation conversations each ask): a fresh list each call."""
    return list(_agent_documents(root or mirror_dir()))


@functools.cache
def _agent_documents(base: Path) -> tuple[Document, ...]:
    out = []
    for name in AGENT_FILE_REPOSITORIES:
        if (base / name.replace("/", "+") / "repo").exists():
            found = repo_files(name, per_kind=PER_REPOSITORY, root=base, kind_of=agent_file_kind)
            out += [d for d in found if not QUOTED_ATTACK.search(d.text)]
    return tuple(out)

"""Folding a set of classifiers over items, and the per-turn verdict.

A `Snapshot` is every classifier's state after some prefix of a conversation, keyed by
the hash chain over that prefix. `Scorer.fold(snapshot, items)` scores only `items` and
returns the next snapshot; `Scorer.verdict` turns a fold into a `TurnVerdict`. Full
mode is the same fold started from `Scorer.empty()` over the whole history, which is
why delta mode can be proven equal to it. `Scorer.fold_many` folds several
conversations' turns at once, sharing the batched classifiers' calls (the monitor lane).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from deltaguard.classifiers.base import CATEGORIES, Classifier, Finding, Scores, State, Update
from deltaguard.items import Item
from deltaguard.state.policy import Decision, Policy

CHAIN_ROOT = hashlib.sha256(b"deltaguard/items/v1").digest()


def chain_step(chain: bytes, item: Item) -> bytes:
    return hashlib.sha256(chain + item.digest).digest()


def chain_of(items: Sequence[Item], start: bytes = CHAIN_ROOT) -> list[bytes]:
    """The chain value after each item (len(items) values)."""
    out = []
    chain = start
    for item in items:
        chain = chain_step(chain, item)
        out.append(chain)
    return out


def longest_prefix(
    chains: Sequence[bytes], lookup: Callable[[bytes], Snapshot | None]
) -> tuple[int, Snapshot | None]:
    """Resume from the longest scored prefix of a resent history.

    `chains` is `chain_of(history)`; `lookup` maps a chain value to the snapshot taken
    there, if any. Returns (the prefix's length, its snapshot), or (0, None)."""
    for k in range(len(chains), 0, -1):
        snapshot = lookup(chains[k - 1])
        if snapshot is not None:
            return k, snapshot
    return 0, None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Classifier states after the first `length` items of a conversation.

    Immutable: forks share it, and folding builds a new one (copy-on-write).
    """

    chain: bytes
    length: int
    states: Mapping[str, State]
    classifier_scores: Mapping[str, Scores]  # each classifier's conversation-level scores

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible form (for changelog tables and spools)."""
        return {
            "chain": self.chain.hex(),
            "length": self.length,
            "states": dict(self.states),
            "classifier_scores": dict(self.classifier_scores),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Snapshot:
        return cls(
            chain=bytes.fromhex(obj["chain"]),
            length=int(obj["length"]),
            states=MappingProxyType(dict(obj["states"])),
            classifier_scores=MappingProxyType(dict(obj["classifier_scores"])),
        )

    @property
    def scores(self) -> Scores:
        """Conversation-level scores, the max over classifiers, every category present."""
        out = {cat: 0.0 for cat in CATEGORIES}
        for row in self.classifier_scores.values():
            for cat, value in row.items():
                if value > out.get(cat, 0.0):
                    out[cat] = value
        return out


@dataclass(frozen=True, slots=True)
class Fold:
    """What folding some items produced: the next snapshot and how it got there."""

    before: Snapshot
    after: Snapshot
    item_scores: list[Scores]  # merged over classifiers, one per item folded
    tokens: dict[str, int]  # per classifier
    latency_ms: dict[str, float]  # per classifier
    findings: list[Finding] = field(default_factory=list)
    # Per item folded, aligned with `item_scores`: "user" for words a user typed (a user
    # message with no file attached), else the item's role ("tool" for attached files).
    channels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FoldRequest:
    """Items to fold after a snapshot (`chains`: their chain values, when known)."""

    snapshot: Snapshot
    items: Sequence[Item]
    chains: Sequence[bytes] | None = None


class _FoldBuilder:
    """One request's fold, put together classifier by classifier."""

    def __init__(self, snapshot: Snapshot, n_items: int) -> None:
        self.snapshot = snapshot
        self.states = dict(snapshot.states)
        self.clf_scores = dict(snapshot.classifier_scores)
        self.item_scores: list[Scores] = [{} for _ in range(n_items)]
        self.tokens: dict[str, int] = {}
        self.latency: dict[str, float] = {}
        self.findings: list[Finding] = []

    def add(self, name: str, upd: Update, ms: float) -> None:
        self.latency[name] = ms
        self.states[name] = upd.state
        self.tokens[name] = upd.tokens
        self.findings.extend(upd.findings)
        for row, clf_row in zip(self.item_scores, upd.item_scores, strict=True):
            for cat, value in clf_row.items():
                if value > row.get(cat, 0.0):
                    row[cat] = value
        self.clf_scores[name] = upd.scores

    def build(self, items: Sequence[Item], chains: Sequence[bytes] | None) -> Fold:
        snapshot = self.snapshot
        if chains is None:
            chains = chain_of(items, snapshot.chain)
        after = Snapshot(
            chain=chains[-1] if items else snapshot.chain,
            length=snapshot.length + len(items),
            states=MappingProxyType(self.states),
            classifier_scores=MappingProxyType(self.clf_scores),
        )
        channels = tuple("tool" if item.attachments.strip() else item.role for item in items)
        return Fold(snapshot, after, self.item_scores, self.tokens, self.latency, self.findings, channels)


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    decision: Decision
    category_scores: dict[str, float]
    flagged_categories: list[str]
    latency_ms: dict[str, float]  # "total" plus one entry per classifier
    tokens_scored: int
    findings: list[Finding]

    def to_json(self) -> dict[str, Any]:
        """A JSON-compatible form (kept with a response's record)."""
        return {
            "decision": self.decision,
            "category_scores": dict(self.category_scores),
            "flagged_categories": list(self.flagged_categories),
            "latency_ms": dict(self.latency_ms),
            "tokens_scored": self.tokens_scored,
            "findings": [dataclasses.asdict(f) for f in self.findings],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TurnVerdict:
        return cls(
            decision=obj["decision"],
            category_scores=dict(obj["category_scores"]),
            flagged_categories=list(obj["flagged_categories"]),
            latency_ms=dict(obj["latency_ms"]),
            tokens_scored=int(obj["tokens_scored"]),
            findings=[Finding(**f) for f in obj["findings"]],
        )


class Scorer:
    """A fixed, loaded set of classifiers folded together.

    >>> from deltaguard.classifiers.secrets import SecretsClassifier
    >>> from deltaguard.parsing import parse_item
    >>> scorer = Scorer([SecretsClassifier()])
    >>> fold = scorer.fold(scorer.empty(), [parse_item({"role": "user", "content": "hi"})])
    >>> fold.after.length
    1
    """

    def __init__(self, classifiers: Sequence[Classifier], policy: Policy | None = None) -> None:
        names = [c.name for c in classifiers]
        if len(set(names)) != len(names):
            raise ValueError(f"classifier names must be unique, got {names}")
        self.classifiers = list(classifiers)
        self.policy = policy or Policy()

    @property
    def versions(self) -> dict[str, str]:
        return {c.name: c.version for c in self.classifiers}

    @property
    def tag(self) -> str:
        """A short digest of `versions`: what a stored snapshot's states were made by."""
        text = json.dumps(sorted(self.versions.items()), separators=(",", ":"))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    def without_memo(self) -> Scorer:
        """The same loaded classifiers and policy, none of them remembering item results
        across updates (`unmemoised`): every fold does all of its own work, as a baseline
        that rescores from nothing must."""
        return Scorer([unmemoised(c) for c in self.classifiers], self.policy)

    def empty(self) -> Snapshot:
        return Snapshot(
            chain=CHAIN_ROOT,
            length=0,
            states=MappingProxyType({c.name: c.initial_state() for c in self.classifiers}),
            classifier_scores=MappingProxyType({c.name: {} for c in self.classifiers}),
        )

    def fold(
        self,
        snapshot: Snapshot,
        items: Sequence[Item],
        classifiers: Sequence[Classifier] | None = None,
        chains: Sequence[bytes] | None = None,
    ) -> Fold:
        """Score `items` after `snapshot`; classifiers not in `classifiers` keep their state."""
        return self.fold_many([FoldRequest(snapshot, items, chains)], classifiers)[0]

    def fold_many(
        self, requests: Sequence[FoldRequest], classifiers: Sequence[Classifier] | None = None
    ) -> list[Fold]:
        """`fold` of each request, with one call per classifier across all of them.

        A classifier with `update_batch` (the encoder: shared onnxruntime calls) scores
        every request's items together; the others are called once per request. Each
        fold is exactly what `fold` alone returns, but its latency: a batched call's
        time is shared among the requests in proportion to the tokens each cost it.
        """
        active = self.classifiers if classifiers is None else classifiers
        folds = [_FoldBuilder(r.snapshot, len(r.items)) for r in requests]
        for clf in active:
            states = [r.snapshot.states[clf.name] for r in requests]
            batched = getattr(clf, "update_batch", None)
            if batched is not None and len(requests) > 1:
                t0 = time.perf_counter()
                updates = batched(list(zip(states, (r.items for r in requests), strict=True)))
                ms = (time.perf_counter() - t0) * 1000.0
                total = sum(u.tokens for u in updates)
                for fb, upd in zip(folds, updates, strict=True):
                    share = upd.tokens / total if total else 1.0 / len(requests)
                    fb.add(clf.name, upd, ms * share)
                continue
            for fb, state, request in zip(folds, states, requests, strict=True):
                t0 = time.perf_counter()
                upd = clf.update(state, request.items)
                fb.add(clf.name, upd, (time.perf_counter() - t0) * 1000.0)
        return [fb.build(r.items, r.chains) for fb, r in zip(folds, requests, strict=True)]

    def verdict(self, fold: Fold, prior: Fold | None = None, output: Fold | None = None) -> TurnVerdict:
        """The verdict of the conversation as of the end of `fold`.

        `prior` is work done for the same turn before `fold` (full mode's rescoring of
        the history, or a rebuild): its latency and tokens count in the turn's cost.
        `output` is the fold of the turn's output (the model's answer) after `fold`: the
        decision stays the one taken on the input, which is all a gateway can enforce
        before the model answers, but the scores, flagged categories and findings then
        describe the conversation at the end of the turn, its answer included.
        """
        decision, flagged = self.policy.decide(fold.after.scores)
        after = fold.after.scores if output is None else output.after.scores
        findings = fold.findings
        if output is not None:
            flagged = self.policy.flagged(after)
            findings = [*fold.findings, *output.findings]
        latency = dict(fold.latency_ms)
        tokens = dict(fold.tokens)
        if prior is not None:
            for name, ms in prior.latency_ms.items():
                latency[name] = latency.get(name, 0.0) + ms
            for name, n in prior.tokens.items():
                tokens[name] = tokens.get(name, 0) + n
        return TurnVerdict(
            decision=decision,
            category_scores=after,
            flagged_categories=flagged,
            latency_ms={"total": sum(latency.values()), **latency},
            tokens_scored=max(tokens.values(), default=0),
            findings=findings,
        )


def unmemoised(clf: Classifier) -> Classifier:
    """`clf` without its item memo where it keeps one (the encoder entries remember item
    results across conversations and turns), else `clf` itself."""
    without = getattr(clf, "without_memo", None)
    return without() if without is not None else clf


def turn_json(index: int, verdict: TurnVerdict) -> dict[str, Any]:
    """One turn of `replay --json` (docs/contract.md section 2)."""
    out: dict[str, Any] = {
        "index": index,
        "decision": verdict.decision,
        "category_scores": verdict.category_scores,
        "flagged_categories": verdict.flagged_categories,
        "latency_ms": {name: round(ms, 4) for name, ms in verdict.latency_ms.items()},
        "tokens_scored": verdict.tokens_scored,
    }
    if verdict.findings:
        out["findings"] = findings_json(verdict.findings)
    return out


def findings_json(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """Findings as verdicts, the gateway's `safety` object and flag events carry them:
    the item (index in the scored items), category, kind and preview, and the character
    range and score of the span when the classifier located it (docs/contract.md section 6)."""
    out = []
    for f in findings:
        row: dict[str, Any] = {"item": f.item_index, "category": f.category, "kind": f.kind}
        row["preview"] = f.preview
        if f.start is not None and f.end is not None:
            row |= {"start": f.start, "end": f.end}
        if f.score is not None:
            row["score"] = round(f.score, 6)
        out.append(row)
    return out

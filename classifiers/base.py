"""The classifier protocol: every classifier is an incremental fold over items.

    state0 = clf.initial_state()
    upd = clf.update(state0, items)      # scores only `items`
    upd.state, upd.item_scores, upd.scores, upd.tokens

Rules every implementation follows (the conformance suite in
tests/classifiers/test_conformance.py checks them all):

- `update` is pure: it never mutates or aliases its input state; the returned state is
  a new JSON-compatible value (dicts, lists, str, int, float, bool, None) of bounded
  size, so states can be copied by reference, forked and stored in a changelog table.
- Folding is associative over item boundaries: `update(update(s, a).state, b)` gives
  the same state, item scores and conversation scores as `update(s, a + b)`. That is
  what makes delta mode equal to full mode.
- Scores are floats in [0, 1], one per declared category.
- A bounded context window (for matches that span two items) is part of the state and
  counts in `tokens`.
- Items whose `scored` is false (unknown item types) are history only: they get an
  all-zero score and do not break the context window.

A classifier whose work batches well (a transformer) may also offer
`update_batch([(state, items), ...])`, returning exactly the `update` of each pair;
`Scorer.fold_many` uses it to score several conversations' turns in shared calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from deltaguard.items import Item, count_tokens

__all__ = [
    "CATEGORIES",
    "HARM_CATEGORIES",
    "PRINCIPAL_ONLY",
    "Classifier",
    "Finding",
    "Lane",
    "Scores",
    "State",
    "Update",
    "Wrapper",
    "count_tokens",
    "max_update",
    "running_max",
    "zero_scores",
]

State = dict[str, Any]
Scores = dict[str, float]
# Where a classifier runs: "gate", awaited before the upstream model is called; "monitor",
# beside inference, its flags enforced before the model's actions are released or on the
# next turn; "actions", beside inference too, state only, read by the action check when
# the model acts (the provenance sketch).
Lane = Literal["gate", "monitor", "actions"]

# The finer harm categories; `toxicity` is their umbrella (its score is their max,
# classifiers/harm.py). Categories are only ever added, at the end of the taxonomy.
HARM_CATEGORIES: tuple[str, ...] = ("hate", "harassment", "sexual", "violence", "self_harm", "dangerous")
CATEGORIES: tuple[str, ...] = (
    "prompt_injection",
    "jailbreak",
    "toxicity",
    "pii",
    "secrets",
    *HARM_CATEGORIES,
)

# What a channel can be guilty of. A principal (user, system, developer, `instructions`,
# a forged assistant message) may attempt a jailbreak; untrusted content (tool outputs,
# fetched pages, MCP results, attached files) is guilty when it carries instructions aimed
# at the model that the user did not give, which is `prompt_injection`, whatever their
# style: a jailbreak prompt inside a tool output is such an instruction, judged by the
# heads trained on injections through tools. Judged for jailbreak as well, the files
# written to instruct agents ("You are an expert ...") read as jailbreaks to the gate's
# lexical model and to the detector alike.
PRINCIPAL_ONLY: frozenset[str] = frozenset({"jailbreak"})


@dataclass(frozen=True, slots=True)
class Finding:
    """One detection, e.g. an AWS key: where it completed and a redacted preview; a
    classifier that locates its evidence (an injected sentence in a long tool output)
    also gives its character range in the item's text and its score."""

    category: str
    kind: str
    item_index: int  # index into the `items` passed to this `update` call
    preview: str  # never the full secret: e.g. "AKIA…MPLE"
    start: int | None = None
    end: int | None = None
    score: float | None = None


@dataclass(frozen=True, slots=True)
class Update:
    state: State
    item_scores: list[Scores]  # one per item passed in, the item's own evidence
    scores: Scores  # conversation-level, as of the last item
    tokens: int  # tokens processed, context window included
    findings: list[Finding] = field(default_factory=list)


@runtime_checkable
class Classifier(Protocol):
    name: str
    version: str
    categories: tuple[str, ...]
    lane: Lane
    max_state_bytes: int  # bound on len(json.dumps(state)), checked by the suite

    def initial_state(self) -> State: ...

    def update(self, state: State, items: Sequence[Item]) -> Update: ...


class Wrapper:
    """Base of a classifier that wraps another (`inner`): it is the inner one as far as the
    pipeline can tell (name, version, categories, lane, state bound) until it says otherwise,
    and passes `initial_state` and `update` through."""

    def __init__(self, inner: Classifier) -> None:
        self.inner = inner
        self.name = inner.name
        self.version = inner.version
        self.categories = inner.categories
        self.lane = inner.lane
        self.max_state_bytes = inner.max_state_bytes

    def initial_state(self) -> State:
        return self.inner.initial_state()

    def update(self, state: State, items: Sequence[Item]) -> Update:
        return self.inner.update(state, items)


def running_max(previous: Mapping[str, float], item_scores: Sequence[Mapping[str, float]]) -> Scores:
    """Conversation-level scores for classifiers whose evidence never fades."""
    out = dict(previous)
    for scores in item_scores:
        for cat, value in scores.items():
            if value > out.get(cat, 0.0):
                out[cat] = value
    return out


def zero_scores(categories: Sequence[str]) -> Scores:
    return {cat: 0.0 for cat in categories}


def max_update(
    state: State,
    categories: Sequence[str],
    item_scores: list[Scores],
    tokens: int,
    findings: list[Finding] | None = None,
) -> Update:
    """The update of a classifier whose state is its running max alone (`{"max": scores}`)."""
    scores = running_max(state.get("max") or zero_scores(categories), item_scores)
    return Update({"max": dict(scores)}, item_scores, scores, tokens, findings or [])

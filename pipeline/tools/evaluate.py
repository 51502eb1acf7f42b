"""Evaluate and calibrate on your own traffic: `deltaguard eval FILE.jsonl`.

Each conversation of a transcript file (docs/contract.md section 1) says in its `labels`
what it is:

    "labels": {"categories": ["prompt_injection"], "turn": 3}

`categories`: the categories the conversation really is (an attack, a secret, ...), empty
or absent for a benign one; `turn` (optional): the 0-based turn where that content
arrives, to measure how soon it is caught. Lines without `categories` are not scored.

The conversations are replayed in delta mode with the configured classifiers and
policy. Per category, a conversation's score is the highest score it reached at any
turn (verdicts are conversation-level), and it is flagged when any turn flagged the
category. Reported per category: precision, recall, false-positive rate (with Wilson 95%
intervals), ROC AUC and average precision, the turns between the labelled turn and the
one that caught it, and the threshold that meets `--target-fpr` on these conversations,
written as a policy file that `serve --policy` and `replay --policy` read. A threshold is
suggested only where it helps (the current one misses the target rate, or the suggested
one catches more within it) and only with at least 1 / target negatives: a threshold
chosen on fewer would promise a rate the data cannot show. Reported per conversation:
what was expected, what was flagged and at which turn.

Categories that overlap (`RELATED`: an injection and a jailbreak, toxicity and the finer
harm categories) are judged with care: a conversation labelled a jailbreak and also
flagged as an injection was caught for what it is, so it is neither a positive nor a
negative for `prompt_injection` (counted as `related`), unless a reviewer marked that
injection flag a false positive (`labels.review`, which calibrate's labels carry). The
files, ROC and PR curves included (SVG, no plotting library), are written by
`deltaguard.tools.eval_output`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deltaguard.classifiers.base import HARM_CATEGORIES
from deltaguard.errors import DeltaGuardError, TranscriptError
from deltaguard.state.policy import Policy
from deltaguard.state.scoring import Scorer
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.replay import replay_delta
from deltaguard.transcripts import Conversation, read_transcripts

# Categories whose classifiers overlap by design: flagging one for another is no mistake.
RELATED: tuple[frozenset[str], ...] = (
    frozenset({"prompt_injection", "jailbreak"}),
    frozenset({"toxicity", *HARM_CATEGORIES}),
)


def related(category: str) -> frozenset[str]:
    """The other categories of `category`'s group (empty when it has none)."""
    for group in RELATED:
        if category in group:
            return group - {category}
    return frozenset()


@dataclass(frozen=True, slots=True)
class Labelled:
    """One labelled conversation, replayed."""

    id: str
    categories: frozenset[str]
    turn: int | None
    scores: dict[str, float]  # per category, the highest over its turns
    caught_at: dict[str, int]  # per flagged category, the first turn that flagged it
    dismissed: frozenset[str] = frozenset()  # flags a reviewer marked false positive

    def judged(self, category: str) -> bool | None:
        """True: a positive for `category`; False: a negative; None: neither (it is labelled
        with a related category, and no reviewer dismissed a flag of this one)."""
        if category in self.categories:
            return True
        if category in self.dismissed or not related(category) & self.categories:
            return False
        return None


@dataclass
class CategoryReport:
    category: str
    positives: int
    negatives: int
    true_positives: int
    false_positives: int
    auc: float | None
    average_precision: float | None
    turns_to_catch: list[int] = field(default_factory=list)
    related: int = 0  # labelled with a related category only: neither positive nor negative
    related_flagged: int = 0  # of those, flagged for this category too
    threshold_now: float | None = None  # the policy's threshold the counts above are at
    threshold_for_target: float | None = None
    fpr_at_target: float | None = None
    recall_at_target: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "category": self.category,
            "positives": self.positives,
            "negatives": self.negatives,
            "precision": _ratio(self.true_positives, self.true_positives + self.false_positives),
            "recall": _ratio(self.true_positives, self.positives),
            "recall_95": wilson(self.true_positives, self.positives),
            "false_positive_rate": _ratio(self.false_positives, self.negatives),
            "false_positive_rate_95": wilson(self.false_positives, self.negatives),
            "roc_auc": self.auc,
            "average_precision": self.average_precision,
            "turns_to_catch": self.turns_to_catch,
            "related": self.related,
            "related_flagged": self.related_flagged,
            "threshold_now": self.threshold_now,
            "threshold_for_target": self.threshold_for_target,
            "false_positive_rate_at_target": self.fpr_at_target,
            "recall_at_target": self.recall_at_target,
        }
        return out


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 4) if b else None


def wilson(k: int, n: int, z: float = 1.96) -> list[float] | None:
    """Wilson score interval of k successes in n trials."""
    if n == 0:
        return None
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def roc_auc(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    """The probability that a positive outscores a negative (ties count half)."""
    if not positive or not negative:
        return None
    ranked = sorted([(s, 1) for s in positive] + [(s, 0) for s in negative])
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mean_rank = (i + j + 1) / 2  # ranks are 1-based
        rank_sum += mean_rank * sum(label for _, label in ranked[i:j])
        i = j
    n_pos, n_neg = len(positive), len(negative)
    return round((rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg), 4)


def average_precision(positive: Sequence[float], negative: Sequence[float]) -> float | None:
    if not positive:
        return None
    ranked = sorted([(s, 1) for s in positive] + [(s, 0) for s in negative], key=lambda x: -x[0])
    hits, total = 0, 0.0
    for k, (_, label) in enumerate(ranked, start=1):
        if label:
            hits += 1
            total += hits / k
    return round(total / len(positive), 4)


def threshold_for_fpr(negative: Sequence[float], target: float) -> float | None:
    """The lowest threshold (scores are flagged at >= threshold) that flags at most
    `target` of the negatives: just above the highest negative score it must pass.

    None when there are too few negatives for the target to mean anything (fewer than
    1 / target: at 1%, a hundred benign conversations)."""
    if not negative or len(negative) * target < 1.0:
        return None
    allowed = math.floor(target * len(negative))
    cut = sorted(negative, reverse=True)[allowed]
    # Rounded up to the policy file's 6 decimals, so that the written threshold holds.
    return min(1.0, math.floor(cut * 1e6 + 1) / 1e6)


def labelled_categories(conv: Conversation, path: str) -> tuple[frozenset[str], int | None] | None:
    labels = conv.labels
    if "categories" not in labels:
        return None
    cats = labels["categories"]
    if not isinstance(cats, list) or not all(isinstance(c, str) for c in cats):
        raise TranscriptError(path, conv.line, "labels.categories", "expected a list of category names")
    turn = labels.get("turn")
    if turn is not None and (not isinstance(turn, int) or turn < 0):
        raise TranscriptError(path, conv.line, "labels.turn", "expected a non-negative turn index")
    return frozenset(cats), turn


def dismissed_categories(conv: Conversation) -> frozenset[str]:
    """Categories a reviewer marked false positive (`labels.review`, as calibrate exports)."""
    review = conv.labels.get("review")
    if not isinstance(review, dict):
        return frozenset()
    return frozenset(c for c, verdict in review.items() if verdict == "false_positive")


@dataclass
class EvalResult:
    conversations: list[Labelled]
    reports: dict[str, CategoryReport]
    errors: list[TranscriptError]
    target_fpr: float
    unlabelled: int | None = None  # calibrate: recordings left out, no review label
    scores_from: dict[str, int] | None = None  # calibrate: recordings per source of scores
    notes: list[str] = field(default_factory=list)  # what the reader must know (fallbacks)

    def policy(self, base: Policy) -> dict[str, Any]:
        """A policy file: `base` with the thresholds that meet the target FPR."""
        cats = {}
        for name, report in self.reports.items():
            if report.threshold_for_target is None:
                continue
            action = base.categories[name].action if name in base.categories else "flag"
            cats[name] = {"threshold": report.threshold_for_target, "action": action}
        return {"categories": cats}

    def to_json(self) -> dict[str, Any]:
        return {
            "target_fpr": self.target_fpr,
            "conversations": len(self.conversations),
            "categories": {name: r.to_json() for name, r in self.reports.items()},
            "per_conversation": conversation_rows(self),
            "errors": [str(e) for e in self.errors],
            **({} if self.unlabelled is None else {"unlabelled": self.unlabelled}),
            **({} if self.scores_from is None else {"scores_from": self.scores_from}),
            **({"notes": self.notes} if self.notes else {}),
        }


def evaluate(path: Path, scorer: Scorer, target_fpr: float = 0.01) -> EvalResult:
    """Replay the labelled conversations of `path` and measure every labelled category."""
    return evaluate_conversations(
        read_transcripts(path),
        scorer,
        target_fpr,
        str(path),
        f"{path}: no conversation has labels.categories to evaluate against",
    )


def evaluate_conversations(
    entries: Iterable[Conversation | TranscriptError],
    scorer: Scorer,
    target_fpr: float,
    source: str,
    nothing_labelled: str,
) -> EvalResult:
    """The shared path of `deltaguard eval` (a file) and `deltaguard calibrate` (a store):
    replay the labelled conversations and measure every category.

    `nothing_labelled` is the error raised when no conversation carries labels."""
    labelled: list[Labelled] = []
    errors: list[TranscriptError] = []
    tracker = ConversationTracker(scorer)
    for entry in entries:
        if isinstance(entry, TranscriptError):
            errors.append(entry)
            continue
        try:
            label = labelled_categories(entry, source)
        except TranscriptError as exc:
            errors.append(exc)
            continue
        if label is None:
            continue
        turns = replay_delta(entry, tracker)
        scores, caught = scores_of_turns(turns, lambda row: row["flagged_categories"])
        labelled.append(Labelled(entry.id, label[0], label[1], scores, caught, dismissed_categories(entry)))
    return measure(labelled, errors, scorer.policy, target_fpr, nothing_labelled)


def scores_of_turns(
    turns: Iterable[Mapping[str, Any]], flagged: Callable[[Mapping[str, Any]], Iterable[str]]
) -> tuple[dict[str, float], dict[str, int]]:
    """(per category the highest score over the turns, the first turn `flagged` names it),
    from turns in `replay --json` shape."""
    scores: dict[str, float] = {}
    caught: dict[str, int] = {}
    for row in turns:
        for cat, value in row["category_scores"].items():
            scores[cat] = max(scores.get(cat, 0.0), value)
        for cat in flagged(row):
            caught.setdefault(cat, row["index"])
    return scores, caught


def measure(
    labelled: list[Labelled],
    errors: list[TranscriptError],
    policy: Policy,
    target_fpr: float,
    nothing_labelled: str,
) -> EvalResult:
    """The report of every labelled category and every category of `policy`."""
    if not labelled:
        raise DeltaGuardError(nothing_labelled)
    names = sorted({c for conv in labelled for c in conv.categories} | set(policy.categories))
    reports = {name: _report(name, labelled, target_fpr, policy.threshold(name)) for name in names}
    return EvalResult(labelled, reports, errors, target_fpr)


def _report(name: str, convs: Sequence[Labelled], target_fpr: float, threshold_now: float) -> CategoryReport:
    pos = [c for c in convs if c.judged(name) is True]
    neg = [c for c in convs if c.judged(name) is False]
    side = [c for c in convs if c.judged(name) is None]
    pos_scores = [c.scores.get(name, 0.0) for c in pos]
    neg_scores = [c.scores.get(name, 0.0) for c in neg]
    report = CategoryReport(
        name,
        len(pos),
        len(neg),
        sum(name in c.caught_at for c in pos),
        sum(name in c.caught_at for c in neg),
        roc_auc(pos_scores, neg_scores),
        average_precision(pos_scores, neg_scores),
        turns_to_catch=[c.caught_at[name] - (c.turn or 0) for c in pos if name in c.caught_at],
        related=len(side),
        related_flagged=sum(name in c.caught_at for c in side),
        threshold_now=threshold_now,
    )
    threshold = threshold_for_fpr(neg_scores, target_fpr)
    if threshold is None or not pos:
        return report
    fpr = sum(s >= threshold for s in neg_scores) / len(neg_scores)
    recall = sum(s >= threshold for s in pos_scores) / len(pos_scores)
    # Only a threshold that helps: it brings the rate within the target, or catches more there.
    over_target = report.false_positives / len(neg) > target_fpr
    catches_more = recall > report.true_positives / len(pos)
    if (over_target or catches_more) and fpr <= target_fpr:
        report.threshold_for_target = threshold
        report.fpr_at_target = round(fpr, 4)
        report.recall_at_target = round(recall, 4)
    return report


def conversation_rows(result: EvalResult) -> list[dict[str, Any]]:
    """Per conversation: what was expected, what was flagged at which turn, and the outcome,
    misses and false positives first."""
    rows = []
    for c in result.conversations:
        missed = sorted(c.categories - set(c.caught_at))
        wrong = sorted(cat for cat in c.caught_at if c.judged(cat) is False)
        outcome = [f"missed {', '.join(missed)}"] if missed else []
        outcome += [f"false positive {', '.join(wrong)}"] if wrong else []
        rows.append(
            {
                "id": c.id,
                "expected": sorted(c.categories),
                "labelled_turn": c.turn,
                "flagged": dict(sorted(c.caught_at.items(), key=lambda kv: (kv[1], kv[0]))),
                "outcome": "; ".join(outcome) or ("caught" if c.categories else "clean"),
            }
        )
    return sorted(rows, key=lambda r: r["outcome"] in ("caught", "clean"))


def markdown(result: EvalResult, limit: int | None = None) -> str:
    """The report: per category, then per conversation (every one, or with `limit` only the
    first `limit` misses and false positives: what the command prints)."""
    rows = [
        "| category | positives | negatives | related (flagged) | precision | recall [95%] | FPR [95%] | "
        f"ROC AUC | AP | threshold now | suggested for FPR <= {result.target_fpr:g} | recall there | "
        "turns to catch (median) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result.reports.items():
        j = r.to_json()
        if not r.positives and not r.false_positives:
            continue
        turns = sorted(r.turns_to_catch)
        median = turns[len(turns) // 2] if turns else None
        rows.append(
            f"| {name} | {r.positives} | {r.negatives} | {r.related} ({r.related_flagged}) | "
            f"{_fmt(j['precision'])} | {_fmt(j['recall'])} {_ci(j['recall_95'])} | "
            f"{_fmt(j['false_positive_rate'])} {_ci(j['false_positive_rate_95'])} | {_fmt(r.auc)} | "
            f"{_fmt(r.average_precision)} | {_fmt(r.threshold_now)} | {_fmt(r.threshold_for_target)} | "
            f"{_fmt(r.recall_at_target)} | {_fmt(median)} |"
        )
    rows += [f"\nNote: {note}" for note in result.notes]
    per = conversation_rows(result)
    shown = per if limit is None else [r for r in per if r["outcome"] not in ("caught", "clean")][:limit]
    if shown:
        rows += [
            "",
            "| conversation | expected | labelled turn | flagged (first turn) | outcome |",
            "|---|---|---|---|---|",
        ]
        for r in shown:
            flagged = ", ".join(f"{cat} ({turn})" for cat, turn in r["flagged"].items())
            rows.append(
                f"| {r['id']} | {', '.join(r['expected']) or '-'} | {_fmt(r['labelled_turn'])} | "
                f"{flagged or '-'} | {r['outcome']} |"
            )
    if limit is not None and len(shown) < sum(r["outcome"] not in ("caught", "clean") for r in per):
        rows.append(f"(the first {limit} misses and false positives; every conversation is in eval.md)")
    return "\n".join(rows)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _ci(interval: list[float] | None) -> str:
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else ""

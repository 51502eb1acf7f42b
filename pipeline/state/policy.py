"""Decision policy: per-category thresholds and actions.

A category is *flagged* for a conversation once its conversation-level score reaches
its threshold. A turn is *blocked* when a flagged category's action is `block`.

A policy file (`--policy FILE`) overrides the defaults per category and per field, and
the action check's settings (`actions`, below):

    {"categories": {"pii": {"action": "block"}, "prompt_injection": {"threshold": 0.6}},
     "actions": {"action": "flag"}}
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from deltaguard.classifiers.base import CATEGORIES, HARM_CATEGORIES, Scores
from deltaguard.errors import PolicyError

Decision = Literal["allow", "flag", "block"]


class CategoryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.5, ge=0.0, le=1.0)
    # "sanitize": spans located in untrusted content (tool outputs, files) are cut out of
    # what the model is sent and the turn goes on (deltaguard.lanes.sanitize); a span it
    # cannot cut out blocks.
    action: Literal["block", "flag", "sanitize"] = "flag"
    # A monitor-lane verdict whose evidence is a user message blocks only at this score or
    # above; from `threshold` up to it, it alerts (a flag event) without interrupting the
    # conversation. None: `threshold` blocks, whatever carried the evidence.
    user_block_threshold: float | None = Field(None, ge=0.0, le=1.0)


# The detector's lowest scaled score above every benign user message of the validation
# split (2,149 benign prompts of the detection corpus, 3,712 user messages of the real
# agent conversations; `python -m training.user_block`): precision 1.0 there, 39.5% of the
# validation user attacks reach it, 63.2% reach 0.5.
USER_BLOCK_THRESHOLD = 0.9


# The action check's threshold, chosen on validation data (agentdojo's banking and slack
# suites, the validation split of the benign agent traffic; `python -m eval.action_check`):
# a string an instruction in untrusted content told the model to send to, pay, delete or
# run, at the weakest instruction level. Every score between 0.3 and it decides the same.
ACTION_THRESHOLD = 0.3333


class ActionPolicy(BaseModel):
    """What the action check does with the model's actions (deltaguard.lanes.provenance):
    an action scoring `threshold` or more is an injection that worked. "block": it never
    reaches the client, and the response fails with `prompt_injection`; "flag": it is
    released, and a flag event says why; "off": actions are not checked."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["block", "flag", "off"] = "block"
    threshold: float = Field(ACTION_THRESHOLD, gt=0.0, le=1.0)
    category: str = "prompt_injection"  # the category a blocked or flagged action is reported in


def _default_categories() -> dict[str, CategoryPolicy]:
    return {
        "prompt_injection": CategoryPolicy(
            threshold=0.5, action="block", user_block_threshold=USER_BLOCK_THRESHOLD
        ),
        "jailbreak": CategoryPolicy(threshold=0.5, action="block", user_block_threshold=USER_BLOCK_THRESHOLD),
        "toxicity": CategoryPolicy(threshold=0.5, action="flag"),
        "pii": CategoryPolicy(threshold=0.5, action="flag"),
        "secrets": CategoryPolicy(threshold=0.5, action="block"),
        # The finer harm categories (toxicity is their umbrella): flagged, not blocked,
        # by default; a deployment that wants to refuse harmful requests sets "block".
        **{cat: CategoryPolicy(threshold=0.5, action="flag") for cat in HARM_CATEGORIES},
    }


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    categories: dict[str, CategoryPolicy] = Field(default_factory=_default_categories)
    actions: ActionPolicy = Field(default_factory=ActionPolicy)

    def with_thresholds(self, thresholds: Mapping[str, float]) -> Policy:
        """A copy whose thresholds for the given categories are replaced."""
        cats = {name: cp.model_copy() for name, cp in self.categories.items()}
        for name, value in thresholds.items():
            cats[name] = (cats.get(name) or CategoryPolicy()).model_copy(update={"threshold": value})
        return self.model_copy(update={"categories": cats})

    def threshold(self, category: str) -> float:
        cp = self.categories.get(category)
        return cp.threshold if cp else 0.5

    def flagged(self, scores: Mapping[str, float]) -> list[str]:
        return [c for c in ordered_categories(scores) if scores[c] >= self.threshold(c)]

    def decide(self, scores: Mapping[str, float]) -> tuple[Decision, list[str]]:
        """Decision and flagged categories from conversation-level scores.

        It depends on the history only, never on how it was cut into turns: the whole
        history is the upstream model's prompt, so an injection or a secret anywhere in
        it is sent again with every later turn, and a block category keeps blocking.
        """
        flagged = self.flagged(scores)
        if any(self.categories[c].action == "block" for c in flagged if c in self.categories):
            return "block", flagged
        return ("flag" if flagged else "allow"), flagged

    def monitor_blocking(
        self, flagged: Sequence[str], item_scores: Sequence[Scores], channels: Sequence[str]
    ) -> list[str]:
        """The flagged block categories that a monitor verdict enforces: those whose
        evidence in the folded items (`item_scores`, aligned with their `channels`, see
        `Fold.channels`) reaches the block level: `user_block_threshold` for words a user
        typed, `threshold` for anything else (tool outputs, attached files, the client's
        other text). A category flagged by earlier turns only was decided then."""
        out = []
        for c in flagged:
            cp = self.categories.get(c)
            if cp is None or cp.action != "block":
                continue
            user_at = cp.threshold if cp.user_block_threshold is None else cp.user_block_threshold
            for row, channel in zip(item_scores, channels, strict=True):
                if row.get(c, 0.0) >= (user_at if channel == "user" else cp.threshold):
                    out.append(c)
                    break
        return out


def load_policy(path: Path) -> Policy:
    """The default policy with a policy file's categories and fields laid over it;
    a file that cannot be used raises `PolicyError` naming the file and the field."""
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyError(f"{path}: {exc}") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("categories", {}), dict):
        raise PolicyError(f'{path}: expected {{"categories": {{CATEGORY: {{"threshold": T, "action": A}}}}}}')
    if set(raw) - {"categories", "actions"}:
        raise PolicyError(f"{path}: unknown field(s) {sorted(set(raw) - {'categories', 'actions'})}")
    cats = _default_categories()
    for name, fields in raw.get("categories", {}).items():
        if name not in CATEGORIES:  # a misspelt category would silently change nothing
            raise PolicyError(f"{path}: categories.{name}: unknown category{_hint(name)}")
        base = cats.get(name, CategoryPolicy()).model_dump()
        try:
            if not isinstance(fields, dict):
                raise PolicyError(f"{path}: categories.{name}: expected an object")
            cats[name] = CategoryPolicy.model_validate({**base, **fields})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in ("categories", name, *err["loc"]))
            raise PolicyError(f"{path}: {where}: {err['msg']}") from exc
    return Policy(categories=cats, actions=_action_policy(path, raw.get("actions", {})))


def _action_policy(path: Path, fields: Any) -> ActionPolicy:
    if not isinstance(fields, dict):
        raise PolicyError(f"{path}: actions: expected an object")
    try:
        actions = ActionPolicy.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in ("actions", *err["loc"]))
        raise PolicyError(f"{path}: {where}: {err['msg']}") from exc
    if actions.category not in CATEGORIES:
        raise PolicyError(
            f"{path}: actions.category: unknown category {actions.category!r}{_hint(actions.category)}"
        )
    return actions


def _hint(name: str) -> str:
    near = difflib.get_close_matches(name, CATEGORIES, n=1)
    return f" (did you mean {near[0]!r}?)" if near else f"; known: {', '.join(CATEGORIES)}"


def ordered_categories(scores: Mapping[str, float]) -> list[str]:
    """Taxonomy order first, then any extra categories in sorted order."""
    known = [c for c in CATEGORIES if c in scores]
    return known + sorted(c for c in scores if c not in CATEGORIES)

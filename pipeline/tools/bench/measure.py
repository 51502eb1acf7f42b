"""Per-turn safety cost, delta against full rescoring (`deltaguard bench`).

Every conversation is replayed turn by turn in one process, measured three ways side by
side, interleaved turn by turn so that all three see the same machine conditions:

- **delta**: the pipeline as the gateway runs it: `ConversationTracker.score_turn`
  (store lookups, hash chain, the fold, the new snapshot) then `Scorer.verdict`. The
  turn's model output is then folded in as the post-inference lane does (timed apart:
  it is not on the request path).
- **full**: the whole history refolded from the empty state, then the verdict: what a
  classic guardrail does at every turn. Measured every `full_every`-th turn, because
  its cost grows with the history (and the total with its square).
- **floor**: each classifier's `update` called directly on the turn's new items, from
  that classifier's own state after the previous turn (kept here, with no store, chain
  or verdict around it): the raw model cost of exactly the delta. `pipeline / floor`
  is what the pipeline's machinery adds.

Times are milliseconds on one clock for all three (`--clock`): `wall`
(`time.perf_counter`, latency as a caller sees it) or `cpu` (`time.process_time`, the
work itself, which other processes competing for the cores do not inflate). Each
classifier is wrapped (`TimedClassifier`) so its share of a delta or full turn is read
on that clock; `pipeline` is the whole call, so `pipeline - sum(classifiers)` is the
pipeline's overhead.

    from deltaguard.tools.bench import BenchConfig, run_bench, write_outputs
    result = run_bench(BenchConfig(turns=20, tool_tokens=200))
    write_outputs(result.to_json(), Path("eval/out/bench"))
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from deltaguard.classifiers.base import Classifier, State, Update, Wrapper
from deltaguard.errors import TranscriptError
from deltaguard.items import Item
from deltaguard.state.scoring import Scorer, TurnVerdict, unmemoised
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.bench.result import BenchResult
from deltaguard.tools.bench.samples import PIPELINE, TOTAL, BenchConfig, TurnSample
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import Conversation, parse_conversation, read_transcripts

# -- inputs ----------------------------------------------------------------------------


def rollouts(config: BenchConfig) -> list[Conversation]:
    """The synthetic agent rollouts (deltaguard.tools.rollouts), one seed per conversation."""
    return [
        parse_conversation(
            agent_rollout(f"bench-{i}", config.turns, config.tool_tokens, seed=config.seed + i),
            "<rollout>",
            i,
        )
        for i in range(config.conversations)
    ]


def load_conversations(config: BenchConfig) -> tuple[list[Conversation], list[str]]:
    """Conversations to measure, and the transcript file's bad lines (as messages)."""
    if config.transcript is None:
        return rollouts(config), []
    convs: list[Conversation] = []
    errors: list[str] = []
    for entry in read_transcripts(config.transcript):
        if isinstance(entry, TranscriptError):
            errors.append(str(entry))
        else:
            convs.append(entry)
    return convs, errors


# -- measuring -------------------------------------------------------------------------

Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {
    # Latency as a caller sees it.
    "wall": time.perf_counter,
    # CPU time of this process: what the work costs, unaffected by other processes
    # competing for the cores (use it on a shared or loaded machine).
    "cpu": time.process_time,
}


class TimedClassifier(Wrapper):
    """A classifier whose `update` times itself with the bench's clock.

    The pipeline's own per-classifier timings are wall-clock; wrapping lets delta, full
    and floor all be read on one clock. The wrapper costs two clock reads per call.
    """

    def __init__(self, inner: Classifier, clock: Clock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.last_ms = 0.0

    def update(self, state: State, items: Sequence[Item]) -> Update:
        t0 = self.clock()
        upd = self.inner.update(state, items)
        self.last_ms = (self.clock() - t0) * 1000.0
        return upd


def timed_scorer(scorer: Scorer, clock: Clock) -> Scorer:
    """The same classifiers and policy, each wrapped in a `TimedClassifier`. A classifier
    that memoises item results across conversations (the encoder entries) is measured
    without its memo: delta, full and floor would otherwise reuse each other's work."""
    return Scorer([TimedClassifier(unmemoised(c), clock) for c in scorer.classifiers], scorer.policy)


def _same_verdict(a: TurnVerdict, b: TurnVerdict) -> bool:
    return (
        a.decision == b.decision
        and a.flagged_categories == b.flagged_categories
        and all(abs(a.category_scores[c] - b.category_scores.get(c, 0.0)) <= 1e-6 for c in a.category_scores)
    )


def _read(timed: Sequence[TimedClassifier], wall_ms: float | None) -> dict[str, float]:
    out = {c.name: c.last_ms for c in timed}
    out[TOTAL] = sum(out.values())
    if wall_ms is not None:
        out[PIPELINE] = wall_ms
    return out


def floor_update(
    classifiers: Sequence[Classifier], states: dict[str, State], items: Sequence[Item], clock: Clock
) -> tuple[dict[str, State], dict[str, float]]:
    """Each raw classifier's `update` on `items` alone, timed; returns the next states."""
    out: dict[str, State] = {}
    ms: dict[str, float] = {}
    for clf in classifiers:
        t0 = clock()
        out[clf.name] = clf.update(states[clf.name], items).state
        ms[clf.name] = (clock() - t0) * 1000.0
    ms[TOTAL] = sum(ms.values())
    return out, ms


def bench_conversation(
    conv: Conversation,
    scorer: Scorer,
    tracker: ConversationTracker,
    stride: int,
    on_turn: Callable[[], None] | None = None,
) -> list[TurnSample]:
    """Measure one conversation turn by turn (see the module docstring).

    `scorer` (and `tracker.scorer`) must be a `timed_scorer`: its classifiers' timings
    are read after each call, and the floor calls the classifiers they wrap.
    """
    timed: list[TimedClassifier] = [c for c in scorer.classifiers if isinstance(c, TimedClassifier)]
    if len(timed) != len(scorer.classifiers):
        raise TypeError("bench_conversation needs a timed_scorer(...)")
    clock = timed[0].clock if timed else time.perf_counter
    raw = [c.inner for c in timed]
    floor_states: dict[str, State] = {c.name: c.initial_state() for c in raw}
    history: list[Item] = []
    previous: str | None = None
    samples: list[TurnSample] = []
    last = len(conv.turns) - 1
    for t, turn in enumerate(conv.turns):
        response_id = f"bench:{conv.line}:{conv.id}#{t}"
        # Alternate which of delta and floor runs first: the second one finds the
        # turn's text warm in the caches.
        if t % 2:
            floor_next, floor_ms = floor_update(raw, floor_states, turn.input, clock)
        t0 = clock()
        tracked = tracker.score_turn(response_id, turn.input, previous)
        verdict = scorer.verdict(tracked.fold, prior=tracked.rebuild)
        delta_ms = _read(timed, (clock() - t0) * 1000.0)
        if not t % 2:
            floor_next, floor_ms = floor_update(raw, floor_states, turn.input, clock)
        sample = TurnSample(
            conversation=conv.id,
            index=t,
            delta_ms=delta_ms,
            floor_ms=floor_ms,
            delta_tokens=dict(tracked.fold.tokens),  # nothing is evicted here: no rebuild
            new_tokens=sum(i.tokens for i in turn.input),
            output_ms=0.0,
        )
        history.extend(turn.input)
        if t % stride == 0 or t == last:
            t0 = clock()
            fold = scorer.fold(scorer.empty(), history)
            full = scorer.verdict(fold)
            sample.full_ms = _read(timed, (clock() - t0) * 1000.0)
            sample.full_tokens = dict(fold.tokens)
            sample.mismatch = not _same_verdict(verdict, full)
        if turn.output:
            t0 = clock()
            tracker.score_output(response_id, turn.output)
            sample.output_ms = (clock() - t0) * 1000.0
            floor_next, _ = floor_update(raw, floor_next, turn.output, clock)
            history.extend(turn.output)
        floor_states = floor_next
        samples.append(sample)
        previous = response_id
        if on_turn is not None:
            on_turn()
    return samples


def run_bench(
    config: BenchConfig,
    scorer: Scorer | None = None,
    progress: Callable[[int], Callable[[], None]] | None = None,
) -> BenchResult:
    """Measure every conversation of `config`; `progress(total_turns)` returns a tick."""
    if scorer is None:
        from deltaguard.state.loading import build_scorer

        scorer = build_scorer()
    if config.clock not in CLOCKS:
        raise ValueError(f"unknown clock {config.clock!r}; expected one of {sorted(CLOCKS)}")
    convs, errors = load_conversations(config)
    result = BenchResult(config, scorer.versions, errors=errors)
    if not convs:
        return result
    scorer = timed_scorer(scorer, CLOCKS[config.clock])
    stride = config.stride(max(len(c.turns) for c in convs))
    tracker = ConversationTracker(scorer)
    # Warm up every path (first-call allocations, regex caches) on a short rollout.
    if config.warmup_turns > 0:
        warm = parse_conversation(
            agent_rollout(
                "warmup", config.warmup_turns, min(config.tool_tokens, 1000), seed=10_000 + config.seed
            ),
            "<warmup>",
            0,
        )
        bench_conversation(warm, scorer, tracker, 1)
    tick = progress(sum(len(c.turns) for c in convs)) if progress is not None else None
    t0 = time.perf_counter()
    for conv in convs:
        # A store of its own per conversation: rollouts that open alike would otherwise
        # share their scored prefix (the store is content-addressed), and each one's
        # delta cost is what is measured.
        tracker = ConversationTracker(scorer)
        result.samples.extend(bench_conversation(conv, scorer, tracker, stride, tick))
    result.wall_s = time.perf_counter() - t0
    return result

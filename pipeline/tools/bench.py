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

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np

from deltaguard.classifiers.base import Classifier, State, Update
from deltaguard.errors import DeltaGuardError, TranscriptError
from deltaguard.items import Item
from deltaguard.state.scoring import Scorer, TurnVerdict, unmemoised
from deltaguard.state.store import ConversationTracker
from deltaguard.tools.rollouts import agent_rollout
from deltaguard.transcripts import Conversation, parse_conversation, read_transcripts

PIPELINE = "pipeline"  # wall time of the whole pipeline call, overhead included
TOTAL = "total"  # sum of the classifiers' own times
FULL_EVERY_TURNS = 200  # full mode is measured at every turn up to this many turns
PERCENTILES = (50, 95, 99)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to measure. `transcript` replaces the synthetic rollouts when set."""

    turns: int = 200
    tool_tokens: int = 1000
    conversations: int = 1
    seed: int = 0
    full_every: int | None = None  # None: every turn up to 200 turns, sparser beyond
    transcript: Path | None = None
    ratio_turn: int = 190  # where the full/delta ratio is reported
    warmup_turns: int = 5
    clock: str = "wall"  # "wall" (latency) or "cpu" (process CPU time): see CLOCKS

    def stride(self, longest: int) -> int:
        """Full mode is measured at turns where index % stride == 0 (and the last)."""
        if self.full_every is not None:
            return max(1, self.full_every)
        return max(1, math.ceil(longest / FULL_EVERY_TURNS))


@dataclass(slots=True)
class TurnSample:
    """One conversation's turn, measured three ways (latency in ms, per name)."""

    conversation: str
    index: int
    delta_ms: dict[str, float]  # classifiers, TOTAL, PIPELINE
    floor_ms: dict[str, float]  # classifiers, TOTAL
    delta_tokens: dict[str, int]  # per classifier
    new_tokens: int  # tokens of the turn's new items (no context window)
    output_ms: float  # post-inference fold of the turn's output (not on the request path)
    full_ms: dict[str, float] | None = None
    full_tokens: dict[str, int] | None = None
    mismatch: bool = False  # delta and full verdicts differ (must never happen)


@dataclass
class BenchResult:
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


class TimedClassifier:
    """A classifier whose `update` times itself with the bench's clock.

    The pipeline's own per-classifier timings are wall-clock; wrapping lets delta, full
    and floor all be read on one clock. The wrapper costs two clock reads per call.
    """

    def __init__(self, inner: Classifier, clock: Clock) -> None:
        self.inner = inner
        self.clock = clock
        self.name = inner.name
        self.version = inner.version
        self.categories = inner.categories
        self.lane = inner.lane
        self.max_state_bytes = inner.max_state_bytes
        self.last_ms = 0.0

    def initial_state(self) -> State:
        return self.inner.initial_state()

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


# -- aggregation -----------------------------------------------------------------------


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 (linear interpolation), rounded to 4 decimals."""
    if not values:
        return {f"p{p}": 0.0 for p in PERCENTILES}
    got = np.percentile(np.asarray(values, dtype=np.float64), PERCENTILES)
    return {f"p{p}": round(float(v), 4) for p, v in zip(PERCENTILES, got, strict=True)}


def _median_int(values: Sequence[int]) -> int:
    return round(statistics.median(values)) if values else 0


def _tokens(rows: Sequence[dict[str, int]], names: Sequence[str]) -> dict[str, int]:
    out = {n: _median_int([r.get(n, 0) for r in rows]) for n in names}
    # As docs/contract.md's tokens_scored: what the busiest classifier processed.
    out["tokens_scored"] = _median_int([max(r.values(), default=0) for r in rows])
    return out


def per_turn(samples: Sequence[TurnSample], names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per turn index, aggregated over conversations (percentiles over them)."""
    by_index: dict[int, list[TurnSample]] = {}
    for s in samples:
        by_index.setdefault(s.index, []).append(s)
    rows = []
    keys = [*names, TOTAL, PIPELINE]
    for index in sorted(by_index):
        group = by_index[index]
        fulls = [s for s in group if s.full_ms is not None]
        row: dict[str, Any] = {
            "index": index,
            "samples": len(group),
            "new_tokens": _median_int([s.new_tokens for s in group]),
            "delta": {
                "latency_ms": {k: percentiles([s.delta_ms[k] for s in group]) for k in keys},
                "tokens": _tokens([s.delta_tokens for s in group], names),
                "output_ms": percentiles([s.output_ms for s in group]),
            },
            "floor": {
                "latency_ms": {k: percentiles([s.floor_ms[k] for s in group]) for k in [*names, TOTAL]}
            },
            "full": None,
        }
        if fulls:
            row["full"] = {
                "samples": len(fulls),
                "latency_ms": {k: percentiles([s.full_ms[k] for s in fulls if s.full_ms]) for k in keys},
                "tokens": _tokens([s.full_tokens for s in fulls if s.full_tokens], names),
                "verdict_mismatches": sum(s.mismatch for s in fulls),
            }
        rows.append(row)
    return rows


def per_classifier(samples: Sequence[TurnSample], names: Sequence[str]) -> dict[str, Any]:
    """Percentiles over every measured turn, per classifier, TOTAL and PIPELINE."""
    fulls = [s for s in samples if s.full_ms is not None]
    out: dict[str, Any] = {}
    for k in [*names, TOTAL, PIPELINE]:
        row: dict[str, Any] = {
            "delta_ms": percentiles([s.delta_ms[k] for s in samples]),
            "full_ms": percentiles([s.full_ms[k] for s in fulls if s.full_ms]),
        }
        if k != PIPELINE:
            row["floor_ms"] = percentiles([s.floor_ms[k] for s in samples])
        if k in names:
            row["delta_tokens"] = percentiles([s.delta_tokens.get(k, 0) for s in samples])
            row["full_tokens"] = percentiles([s.full_tokens.get(k, 0) for s in fulls if s.full_tokens])
            row["pipeline_over_floor"] = _median_ratio([(s.delta_ms[k], s.floor_ms[k]) for s in samples])
        out[k] = row
    return out


def _median_ratio(pairs: Sequence[tuple[float, float]]) -> float | None:
    ratios = [a / b for a, b in pairs if b > 0]
    return round(statistics.median(ratios), 3) if ratios else None


def _p50(row: dict[str, Any], mode: str, key: str = PIPELINE) -> float:
    return float(row[mode]["latency_ms"][key]["p50"])


def summarize(result: BenchResult, turns: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures (see `SUMMARY_DOC` for what each one is)."""
    samples = result.samples
    n = len(turns)
    summary: dict[str, Any] = {
        "conversations": len({(s.conversation) for s in samples}),
        "turns": n,
        "full_every": result.config.stride(n) if n else None,
        "wall_s": round(result.wall_s, 2),
    }
    if not turns:
        return summary
    at = min(result.config.ratio_turn, n - 1)
    window = [r for r in turns if r["full"] is not None and abs(r["index"] - at) <= 5]
    if window:
        d = statistics.median(_p50(r, "delta") for r in window)
        f = statistics.median(_p50(r, "full") for r in window)
        d_clf = statistics.median(_p50(r, "delta", TOTAL) for r in window)
        f_clf = statistics.median(_p50(r, "full", TOTAL) for r in window)
        summary["ratio_turn"] = at
        summary["ratio_window"] = [window[0]["index"], window[-1]["index"]]
        summary["delta_ms_at_turn"] = round(d, 3)
        summary["full_ms_at_turn"] = round(f, 3)
        summary["full_over_delta_at_turn"] = round(f / d, 1) if d > 0 else None
        summary["full_over_delta_classifiers_only_at_turn"] = round(f_clf / d_clf, 1) if d_clf > 0 else None
        full_at = min(window, key=lambda r: abs(r["index"] - at))
        summary["full_tokens_at_turn"] = full_at["full"]["tokens"]["tokens_scored"]
    delta = [_p50(r, "delta") for r in turns]
    if n >= 50:
        early = statistics.median(delta[10:30])
        summary["delta_flatness_last20_over_10_29"] = round(statistics.median(delta[-20:]) / early, 3)
    else:
        summary["delta_flatness_last20_over_10_29"] = None  # needs at least 50 turns
    summary["delta_ms_p50"] = round(statistics.median(delta), 3)
    summary["floor_ms_p50"] = round(statistics.median(_p50(r, "floor", TOTAL) for r in turns), 3)
    summary["pipeline_over_floor"] = _median_ratio(
        [(s.delta_ms[PIPELINE], s.floor_ms[TOTAL]) for s in samples]
    )
    summary["pipeline_overhead_ms_p50"] = round(
        statistics.median(s.delta_ms[PIPELINE] - s.delta_ms[TOTAL] for s in samples), 4
    )
    tok = [r["delta"]["tokens"]["tokens_scored"] for r in turns[1:]] or [0]
    summary["delta_tokens_per_turn"] = {"min": min(tok), "p50": _median_int(tok), "max": max(tok)}
    summary["verdict_mismatches"] = [
        {"conversation": s.conversation, "turn": s.index} for s in samples if s.mismatch
    ]
    return summary


SUMMARY_DOC = {
    "full_over_delta_at_turn": "median full / median delta pipeline latency over the full-measured turns "
    "within 5 of ratio_turn",
    "delta_flatness_last20_over_10_29": "median delta latency of the last 20 turns / of turns 10-29 "
    "(1.0: flat)",
    "pipeline_over_floor": "median over turns of delta pipeline wall time / sum of the raw classifier "
    "updates on the same new items",
    "pipeline_overhead_ms_p50": "median of pipeline wall time - the classifiers' own time in it",
}


def environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# -- outputs ---------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    """The report as markdown: headline figures, per-classifier table, sample turns."""
    s = data["summary"]
    cfg = data["config"]
    source = cfg["transcript"] or (
        f"{cfg['conversations']} synthetic agent rollout(s), {cfg['turns']} turns x {cfg['tool_tokens']} "
        f"tool tokens, seed {cfg['seed']}"
    )
    lines = [
        "# DeltaGuard bench: delta against full rescoring",
        "",
        f"Source: {source}. Classifiers: "
        + ", ".join(f"`{k}` {v}" for k, v in data["classifiers"].items())
        + f". Full mode measured every {s.get('full_every')} turn(s). "
        f"{data['environment']['cpus']} CPUs, Python {data['environment']['python']}.",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {k} | {_fmt(v)} |" for k, v in s.items()),
        "",
        "Latency per turn (ms) over all measured turns; `floor` is the raw classifiers' `update` on the "
        "same new items; `total` is the sum of the classifiers, `pipeline` the wall time of the whole call.",
        "",
        "| name | delta p50 | delta p95 | delta p99 | full p50 | full p95 | full p99 | floor p50 "
        "| floor p95 | floor p99 | delta tokens p50 | full tokens p50 | pipeline/floor |",
        "|---|" + "---:|" * 12,
    ]
    for name, row in data["per_classifier"].items():
        floor = row.get("floor_ms", {})
        lines.append(
            "| "
            + " | ".join(
                [
                    name,
                    *(_fmt(row["delta_ms"][p]) for p in ("p50", "p95", "p99")),
                    *(_fmt(row["full_ms"][p]) for p in ("p50", "p95", "p99")),
                    *(_fmt(floor[p]) if floor else "" for p in ("p50", "p95", "p99")),
                    _fmt(row["delta_tokens"]["p50"]) if "delta_tokens" in row else "",
                    _fmt(row["full_tokens"]["p50"]) if "full_tokens" in row else "",
                    _fmt(row.get("pipeline_over_floor", "")),
                ]
            )
            + " |"
        )
    turns = data["turns"]
    if turns:
        picks = sorted({0, 1, 10, 50, 100, 150, 190, 199, len(turns) - 1} & set(range(len(turns))))
        lines += [
            "",
            "Selected turns (p50 over conversations, ms):",
            "",
            "| turn | new tokens | delta pipeline | delta classifiers | floor | full pipeline "
            "| full tokens |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for i in picks:
            r = turns[i]
            full = r["full"]
            lines.append(
                f"| {r['index']} | {r['new_tokens']} | {_fmt(_p50(r, 'delta'))} | "
                f"{_fmt(_p50(r, 'delta', TOTAL))} | {_fmt(_p50(r, 'floor', TOTAL))} | "
                + (f"{_fmt(_p50(r, 'full'))} | {full['tokens']['tokens_scored']} |" if full else "- | - |")
            )
    return "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "none" if not value else json.dumps(value)
    return "n/a" if value is None else str(value)


def write_outputs(data: dict[str, Any], out: Path, plots: bool = True) -> dict[str, Path]:
    """Write `data` (`BenchResult.to_json()`) into `out` as bench.json, bench.md and the
    PNG plots; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
    paths["json"].write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    paths["markdown"].write_text(markdown(data), encoding="utf-8")
    if plots and data["turns"]:
        paths.update(plot_all(data, out))
    return paths


def copy_figure(paths: dict[str, Path], dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths["main_png"], dest)


# -- plots -----------------------------------------------------------------------------

_DELTA, _FULL, _FLOOR = "tab:blue", "tab:red", "0.45"


def _series(turns: Sequence[dict[str, Any]], mode: str, key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in turns:
        if r[mode] is not None and key in r[mode]["latency_ms"]:
            xs.append(r["index"])
            ys.append(max(_p50(r, mode, key), 1e-4))  # log axes
    return xs, ys


def _latency_axes(ax: Any, turns: Sequence[dict[str, Any]], key: str, title: str, unit: str) -> None:
    full = _series(turns, "full", key)
    sparse = len(full[0]) < len(turns)  # measured every k-th turn: show the points
    ax.plot(*full, color=_FULL, label="full rescoring", marker="." if sparse else None)
    ax.plot(*_series(turns, "delta", key), color=_DELTA, label="delta (DeltaGuard)")
    floor_key = TOTAL if key == PIPELINE else key
    ax.plot(*_series(turns, "floor", floor_key), color=_FLOOR, linestyle="--", label="floor (raw models)")
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel(f"{unit} per turn (ms)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)


def _breakdown_axes(ax: Any, turns: Sequence[dict[str, Any]], names: Sequence[str], unit: str) -> None:
    xs = [r["index"] for r in turns]
    layers = [[_p50(r, "delta", n) for r in turns] for n in names]
    overhead = [max(0.0, _p50(r, "delta") - _p50(r, "delta", TOTAL)) for r in turns]
    ax.stackplot(xs, *layers, overhead, labels=[*names, "pipeline overhead"], alpha=0.85)
    ax.set_xlabel("turn")
    ax.set_ylabel(f"delta {unit} per turn (ms)")
    ax.set_title("Where a delta turn's time goes")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(True, alpha=0.25)


def plot_all(data: dict[str, Any], out: Path) -> dict[str, Path]:
    """bench.png (the headline figure), latency_per_classifier.png, delta_breakdown.png."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise DeltaGuardError(
            "the benchmark's plots need matplotlib: pip install 'deltaguard[bench]' (or pass --no-plots)"
        ) from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = data["turns"]
    names = list(data["classifiers"])
    s = data["summary"]
    cpu = data["config"].get("clock") == "cpu"
    unit = "CPU time" if cpu else "latency"
    whole = "pipeline, CPU time" if cpu else "pipeline wall time"
    paths = {
        "main_png": out / "bench.png",
        "per_classifier_png": out / "latency_per_classifier.png",
        "breakdown_png": out / "delta_breakdown.png",
    }

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    _latency_axes(ax1, turns, PIPELINE, f"Safety cost per turn ({whole})", unit)
    ax1.legend(loc="upper left", fontsize="small")
    _breakdown_axes(ax2, turns, names, unit)
    ratio = s.get("full_over_delta_at_turn")
    flat = s.get("delta_flatness_last20_over_10_29")
    cfg = data["config"]
    source = cfg["transcript"] or (
        f"{cfg['turns']}-turn agent rollout, {cfg['tool_tokens']} tokens per tool output"
    )
    fig.suptitle(
        f"DeltaGuard, delta vs full rescoring: {source}"
        + (f"; full/delta at turn {s.get('ratio_turn')}: {ratio}x" if ratio else "")
        + (f"; flatness {flat}" if flat else "")
        + (f"; pipeline/floor {s.get('pipeline_over_floor')}" if s.get("pipeline_over_floor") else ""),
        fontsize="medium",
    )
    fig.tight_layout()
    fig.savefig(paths["main_png"], dpi=110)
    plt.close(fig)

    keys = [PIPELINE, *names]
    cols = min(2, len(keys))
    rows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.8 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        _latency_axes(ax, turns, key, f"all classifiers ({whole})" if key == PIPELINE else key, unit)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    axes.flat[0].legend(loc="upper left", fontsize="small")
    fig.suptitle("Latency per turn and per classifier: delta, full rescoring, raw-model floor")
    fig.tight_layout()
    fig.savefig(paths["per_classifier_png"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    _breakdown_axes(ax, turns, names, unit)
    fig.tight_layout()
    fig.savefig(paths["breakdown_png"], dpi=110)
    plt.close(fig)
    return paths


# -- command line ----------------------------------------------------------------------


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_bench_parser(sub: Any) -> None:
    """Add the `bench` subcommand to the CLI's subparsers."""
    from deltaguard.classifiers.registry import parse_names

    bp = sub.add_parser(
        "bench",
        help="per-turn classifier latency, delta against full rescoring; JSON, markdown and PNG plots",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bp.add_argument("--turns", type=_positive, default=200, help="turns per synthetic rollout")
    bp.add_argument("--tool-tokens", type=_positive, default=1000, help="tokens per tool output")
    bp.add_argument("--conversations", type=_positive, default=1, help="rollouts (one seed each)")
    bp.add_argument("--seed", type=int, default=0)
    bp.add_argument("--transcript", type=Path, metavar="FILE", help="measure this transcript file instead")
    bp.add_argument(
        "--full-every",
        type=_positive,
        metavar="K",
        help=f"measure full mode every K-th turn (default: every turn up to {FULL_EVERY_TURNS} turns, "
        f"then about {FULL_EVERY_TURNS} turns in all)",
    )
    bp.add_argument("--ratio-turn", type=int, default=190, help="where full/delta is reported")
    bp.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: latency; cpu: this process's CPU time (steadier on a loaded machine)",
    )
    bp.add_argument(
        "--classifiers",
        type=parse_names,
        help="comma-separated classifier names (default: the default set)",
    )
    bp.add_argument("--models-dir", type=Path, metavar="DIR")
    bp.add_argument("--out", type=Path, default=Path("eval/out/bench"), help="output directory")
    bp.add_argument("--figure", type=Path, help="also copy the main PNG (bench.png) here")
    bp.add_argument("--no-plots", action="store_true", help="JSON and markdown only")
    bp.add_argument("--no-progress", action="store_true", help="never show the progress bar")


def cmd_bench(args: argparse.Namespace) -> int:
    import sys

    from tqdm import tqdm

    from deltaguard.classifiers.registry import DEFAULT_NAMES
    from deltaguard.models import MODELS_DIR
    from deltaguard.state.loading import build_scorer

    if args.transcript is not None and not args.transcript.is_file():
        print(f"deltaguard bench: {args.transcript}: no such file", file=sys.stderr)
        return 2
    if not args.no_plots and find_spec("matplotlib") is None:  # fail before the run, not after
        print(
            "deltaguard bench: plots need matplotlib: pip install 'deltaguard[bench]', or --no-plots",
            file=sys.stderr,
        )
        return 2
    config = BenchConfig(
        turns=args.turns,
        tool_tokens=args.tool_tokens,
        conversations=args.conversations,
        seed=args.seed,
        full_every=args.full_every,
        transcript=args.transcript,
        ratio_turn=args.ratio_turn,
        clock=args.clock,
    )
    scorer = build_scorer(args.classifiers or DEFAULT_NAMES, args.models_dir or MODELS_DIR)
    show = sys.stderr.isatty() and not args.no_progress
    bars: list[Any] = []

    def progress(total: int) -> Callable[[], None]:
        bar = tqdm(total=total, unit="turn", disable=not show, file=sys.stderr)
        bars.append(bar)
        return lambda: bar.update(1)

    try:
        result = run_bench(config, scorer, progress)
    finally:
        for bar in bars:
            bar.close()
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    if not result.samples:
        print("deltaguard bench: nothing to measure", file=sys.stderr)
        return 1
    data = result.to_json()
    paths = write_outputs(data, args.out, plots=not args.no_plots)
    if args.figure is not None and "main_png" in paths:
        copy_figure(paths, args.figure)
        paths["figure"] = args.figure
    print(markdown(data))
    for name, path in paths.items():
        print(f"{name}: {path}")
    mismatches = data["summary"].get("verdict_mismatches")
    if mismatches:
        print(f"deltaguard bench: delta and full verdicts differ at {mismatches}", file=sys.stderr)
        return 1
    return 1 if result.errors else 0

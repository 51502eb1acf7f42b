"""Delta against full rescoring on one long agent rollout, side by side in one run.

    python -m eval.bench_delta --turns 200 --tool-tokens 1000

Replays the same synthetic rollout (eval/rollouts.py) in delta and in full mode with
the default classifiers, and reports per turn: latency, tokens scored, and the
full/delta ratio. Flatness is the delta latency of the last 20 turns over that of turns
10-29 (1.0 is flat). Writes eval/out/bench_delta.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tqdm import tqdm

from pipeline.replay import replay_delta, replay_full
from pipeline.rollouts import agent_rollout
from pipeline.runtime import build_scorer
from pipeline.store import ConversationTracker
from pipeline.transcripts import parse_conversation

OUT = Path(__file__).resolve().parent / "out"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--tool-tokens", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    conv = parse_conversation(agent_rollout("bench", args.turns, args.tool_tokens), "<rollout>", 1)
    scorer = build_scorer()
    tracker = ConversationTracker(scorer)
    # Warm up both paths (first-call allocations) on a short prefix.
    short = parse_conversation(agent_rollout("warm", 5, args.tool_tokens, seed=1), "<warm>", 1)
    replay_delta(short, tracker)
    replay_full(short, scorer)

    delta = replay_delta(conv, tracker)
    full = []
    # Full mode is quadratic: show progress, one turn at a time.
    history: list = []
    for t, turn in enumerate(
        tqdm(conv.turns, desc="full mode", file=sys.stderr, disable=not sys.stderr.isatty())
    ):
        history.extend(turn.input)
        verdict = scorer.verdict(scorer.fold(scorer.empty(), history))
        full.append(
            {
                "index": t,
                "latency_ms": verdict.latency_ms,
                "tokens_scored": verdict.tokens_scored,
                "decision": verdict.decision,
                "category_scores": verdict.category_scores,
            }
        )
        history.extend(turn.output)

    mismatches = [
        d["index"]
        for d, f in zip(delta, full, strict=True)
        if d["decision"] != f["decision"]
        or any(abs(d["category_scores"][c] - f["category_scores"][c]) > 1e-6 for c in d["category_scores"])
    ]
    d_ms = [t["latency_ms"]["total"] for t in delta]
    f_ms = [t["latency_ms"]["total"] for t in full]
    at = min(190, args.turns - 1)
    window = slice(max(0, at - 5), at + 5)  # median over a few turns: one turn is noisy
    ratio = statistics.median(f_ms[window]) / statistics.median(d_ms[window])
    early = statistics.median(d_ms[10:30]) if args.turns >= 30 else statistics.median(d_ms)
    flatness = statistics.median(d_ms[-20:]) / early
    d_tok = [t["tokens_scored"] for t in delta]
    summary = {
        "turns": args.turns,
        "tool_tokens": args.tool_tokens,
        "classifiers": scorer.versions,
        "turn": at,
        "full_over_delta_latency_at_turn": round(ratio, 1),
        "delta_ms_median": round(statistics.median(d_ms[1:]), 3),
        "full_ms_at_turn": round(statistics.median(f_ms[window]), 3),
        "delta_flatness_last20_over_10_30": round(flatness, 3),
        "delta_tokens_per_turn": {"min": min(d_tok[1:]), "max": max(d_tok[1:])},
        "full_tokens_at_turn": full[at]["tokens_scored"],
        "verdict_mismatches": mismatches,
        "per_classifier_ms_median_delta": {
            name: round(statistics.median(t["latency_ms"][name] for t in delta[1:]), 4)
            for name in scorer.versions
        },
    }
    (args.out / "bench_delta.json").write_text(
        json.dumps({"summary": summary, "delta": delta, "full": full}, indent=1) + "\n"
    )
    md = [
        "| metric | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in summary.items()),
    ]
    (args.out / "bench_delta.md").write_text("\n".join(md) + "\n")
    plot(d_ms, f_ms, d_tok, [t["tokens_scored"] for t in full], args.out / "bench_delta.png")
    print(json.dumps(summary, indent=1))
    return 1 if mismatches else 0


def plot(d_ms, f_ms, d_tok, f_tok, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(f_ms, label="full rescoring", color="tab:red")
    ax1.plot(d_ms, label="delta (DeltaGuard)", color="tab:blue")
    ax1.set_xlabel("turn")
    ax1.set_ylabel("classifier latency per turn (ms)")
    ax1.set_yscale("log")
    ax1.legend()
    ax2.plot(f_tok, label="full rescoring", color="tab:red")
    ax2.plot(d_tok, label="delta (DeltaGuard)", color="tab:blue")
    ax2.set_xlabel("turn")
    ax2.set_ylabel("tokens scored per turn")
    ax2.set_yscale("log")
    ax2.legend()
    fig.suptitle("Per-turn safety cost over one agent rollout")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

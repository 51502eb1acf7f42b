"""Per-turn guardrail latency through a real LiteLLM proxy: DeltaGuard vs the content filter.

Three LiteLLM proxies run side by side on 127.0.0.1, each with the same offline model
(`mock_response`): one without a guardrail (the baseline), one with DeltaGuard
(`deltaguard.integrations.litellm`, default classifiers, gate lane before the call) and
one with LiteLLM's own offline guardrail, `litellm_content_filter` (prebuilt secret and
PII patterns plus its prompt-injection categories, before the call). The same
`--turns`-turn agent conversation, whose user turns carry a `--tool-tokens`-token tool
output, is sent through each with the official `openai` SDK, resending the whole
history every turn as Chat Completions clients do; turns are interleaved across the
proxies so that drift hits all three alike. A turn's guardrail latency is its
client-side latency minus the baseline's for the same turn (median over `--repeats`
conversations). DeltaGuard also reports its own classifier time and tokens scored in
response headers, which are recorded.

Needs the `litellm` extra (a venv of its own; see tests/pipeline/integrations):

    .venv-litellm/bin/python -m eval.bench_litellm --turns 100 --tool-tokens 300

Prints a table and writes eval/out/bench_litellm.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from deltaguard.classifiers.base import count_tokens

ANSWER = "Done. I ran the command and will continue with the next step of the task."
CONTENT_FILTER = {
    "guardrail_name": "content-filter",
    "litellm_params": {
        "guardrail": "litellm_content_filter",
        "mode": "pre_call",
        "default_on": True,
        "patterns": [
            {"pattern_type": "prebuilt", "pattern_name": name, "action": "BLOCK"}
            for name in (
                "aws_access_key",
                "aws_secret_key",
                "github_token",
                "slack_token",
                "us_ssn",
                "credit_card",
            )
        ],
        "categories": [
            {"category": name, "enabled": True, "action": "BLOCK", "severity_threshold": "medium"}
            for name in ("prompt_injection_jailbreak", "prompt_injection_data_exfiltration")
        ],
    },
}
_WORDS = (
    "build test module import function return value error warning config path file line "
    "request response cache index table query result status commit branch merge review "
    "deploy service worker queue thread lock timeout retry metric log trace span"
).split()


def tool_output(turn: int, tokens: int, rng: random.Random) -> str:
    """A benign, varied tool output of about `tokens` tokens (a build or test log)."""
    lines, n = [], 0
    while n < tokens:
        line = (
            f"[step {turn}] " + " ".join(rng.choice(_WORDS) for _ in range(12)) + f" ok={rng.randint(0, 999)}"
        )
        lines.append(line)
        n += count_tokens(line)
    return "\n".join(lines)


def conversation(turns: int, tool_tokens: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        f"Step {t}: the command finished. Its output follows; decide the next step.\n"
        + tool_output(t, tool_tokens, rng)
        for t in range(turns)
    ]


def proxy_configs(workdir: Path) -> dict[str, dict[str, Any]]:
    from tests.support.litellm_proxy import deltaguard_guardrail, mock_model

    models = [mock_model("mock-gpt", ANSWER)]
    return {
        "baseline": {"model_list": models},
        "deltaguard": {
            "model_list": models,
            "guardrails": [
                deltaguard_guardrail(
                    flags_path=str(workdir / "deltaguard" / "flags.jsonl"),
                    billing_path=str(workdir / "deltaguard" / "billing.jsonl"),
                    fsync=False,
                )
            ],
        },
        "content_filter": {"model_list": models, "guardrails": [CONTENT_FILTER]},
    }


def run(turns: int, tool_tokens: int, repeats: int, seed: int) -> dict[str, Any]:
    import openai

    from tests.support.litellm_proxy import running_litellm_proxy

    script = conversation(turns, tool_tokens, seed)
    system = "You are a coding agent. Run one command per step."
    history_tokens, acc = [], count_tokens(system)
    for text in script:
        acc += count_tokens(text)
        history_tokens.append(acc)
        acc += count_tokens(ANSWER)
    names = ("baseline", "deltaguard", "content_filter")
    latency: dict[str, list[list[float]]] = {n: [[] for _ in range(turns)] for n in names}
    dg_ms: list[list[float]] = [[] for _ in range(turns)]
    dg_tokens: list[list[int]] = [[] for _ in range(turns)]
    with tempfile.TemporaryDirectory(prefix="bench-litellm-") as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        configs = proxy_configs(workdir)
        clients = {}
        for name in names:
            proxy = stack.enter_context(running_litellm_proxy(configs[name], workdir / name))
            clients[name] = openai.OpenAI(
                base_url=proxy.base_url + "/v1", api_key=proxy.master_key, max_retries=0, timeout=120
            )
            print(f"  {name}: up on {proxy.base_url}", file=sys.stderr)
        for name in names:  # warm-up: first-request costs (imports, connection) off the books
            for _ in range(3):
                clients[name].chat.completions.create(
                    model="mock-gpt", messages=[{"role": "user", "content": "warm up"}]
                )
        for r in range(repeats):
            # A fresh conversation per repeat (a nonce in its system prompt): nothing is
            # reused from an earlier repeat.
            messages = {n: [{"role": "system", "content": f"{system} (run {r})"}] for n in names}
            for t, text in enumerate(script):
                order = names[t % 3 :] + names[: t % 3]
                for name in order:
                    msgs = messages[name]
                    msgs.append({"role": "user", "content": text})
                    t0 = time.perf_counter()
                    raw = clients[name].chat.completions.with_raw_response.create(
                        model="mock-gpt", messages=msgs
                    )
                    answer = raw.parse().choices[0].message.content
                    latency[name][t].append((time.perf_counter() - t0) * 1000.0)
                    msgs.append({"role": "assistant", "content": answer})
                    if name == "deltaguard":
                        dg_ms[t].append(float(raw.headers["x-deltaguard-latency-ms"]))
                        dg_tokens[t].append(int(raw.headers["x-deltaguard-tokens-scored"]))
                if t % 10 == 9:
                    print(f"  repeat {r + 1}/{repeats}: turn {t + 1}/{turns}", file=sys.stderr)
    med = {n: [statistics.median(v) for v in latency[n]] for n in names}
    overhead = {n: [g - b for g, b in zip(med[n], med["baseline"], strict=True)] for n in names[1:]}
    return {
        "turns": turns,
        "tool_tokens": tool_tokens,
        "repeats": repeats,
        "seed": seed,
        "history_tokens": history_tokens,
        "latency_ms_median": {n: [round(x, 3) for x in med[n]] for n in names},
        "guardrail_overhead_ms": {n: [round(x, 3) for x in overhead[n]] for n in overhead},
        "deltaguard_classifier_ms_median": [round(statistics.median(v), 4) for v in dg_ms],
        "deltaguard_tokens_scored": [int(statistics.median(v)) for v in dg_tokens],
    }


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    turns = result["turns"]
    k = max(1, turns // 10)
    out: dict[str, Any] = {"window_turns": k}
    for name, series in result["guardrail_overhead_ms"].items():
        first, last = statistics.mean(series[:k]), statistics.mean(series[-k:])
        out[name] = {
            "overhead_ms_first_turns": round(first, 3),
            "overhead_ms_last_turns": round(last, 3),
            "growth_ms_per_1k_history_tokens": round(
                (last - first)
                / max(
                    1e-9,
                    (
                        statistics.mean(result["history_tokens"][-k:])
                        - statistics.mean(result["history_tokens"][:k])
                    )
                    / 1000,
                ),
                4,
            ),
        }
    dg = result["deltaguard_classifier_ms_median"]
    out["deltaguard_classifier_ms"] = {
        "first_turns": round(statistics.mean(dg[:k]), 4),
        "last_turns": round(statistics.mean(dg[-k:]), 4),
    }
    toks = result["deltaguard_tokens_scored"]
    out["deltaguard_tokens_scored"] = {
        "first_turns": statistics.mean(toks[:k]),
        "last_turns": statistics.mean(toks[-k:]),
    }
    out["history_tokens"] = {"first": result["history_tokens"][0], "last": result["history_tokens"][-1]}
    return out


def print_table(result: dict[str, Any], summary: dict[str, Any]) -> None:
    turns = result["turns"]
    shown = sorted({1, *range(10, turns + 1, 10), turns})
    med, over = result["latency_ms_median"], result["guardrail_overhead_ms"]
    print(
        f"\nLiteLLM {result['litellm_version']}, {turns} turns, ~{result['tool_tokens']} tool tokens/turn, "
        f"median of {result['repeats']} conversations (ms, client side)\n"
    )
    header = (
        f"{'turn':>5} {'history tok':>11} {'baseline':>9} | {'DeltaGuard':>10} {'overhead':>8} "
        f"{'clf ms':>7} {'tok scored':>10} | {'content filter':>14} {'overhead':>8}"
    )
    print(header)
    print("-" * len(header))
    for t in shown:
        i = t - 1
        print(
            f"{t:>5} {result['history_tokens'][i]:>11,} {med['baseline'][i]:>9.2f} | "
            f"{med['deltaguard'][i]:>10.2f} {over['deltaguard'][i]:>8.2f} "
            f"{result['deltaguard_classifier_ms_median'][i]:>7.3f} "
            f"{result['deltaguard_tokens_scored'][i]:>10,} | "
            f"{med['content_filter'][i]:>14.2f} {over['content_filter'][i]:>8.2f}"
        )
    k = summary["window_turns"]
    print(f"\nguardrail overhead, mean of the first / last {k} turns:")
    for name in ("deltaguard", "content_filter"):
        s = summary[name]
        print(
            f"  {name:<15} {s['overhead_ms_first_turns']:8.2f} ms -> {s['overhead_ms_last_turns']:8.2f} ms "
            f"({s['growth_ms_per_1k_history_tokens']:+.3f} ms per 1k tokens of history)"
        )
    c = summary["deltaguard_classifier_ms"]
    print(
        f"  DeltaGuard classifier time (its own header): {c['first_turns']:.3f} ms"
        f" -> {c['last_turns']:.3f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--tool-tokens", type=int, default=300, help="tokens of tool output per user turn")
    parser.add_argument("--repeats", type=int, default=3, help="conversations per proxy; per-turn medians")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path("eval/out/bench_litellm.json"))
    args = parser.parse_args(argv)
    if find_spec("litellm") is None:
        print(
            "bench_litellm needs the `litellm` extra: run it from a venv with "
            "pip install -e '.[dev,litellm]' (e.g. .venv-litellm/bin/python -m eval.bench_litellm)",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    started = time.time()
    result = run(args.turns, args.tool_tokens, args.repeats, args.seed)
    result["litellm_version"] = version("litellm")
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    result["command"] = "python -m eval.bench_litellm " + " ".join(argv if argv is not None else sys.argv[1:])
    result["wall_s"] = round(time.time() - started, 1)
    summary = summarize(result)
    result["summary"] = summary
    print_table(result, summary)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

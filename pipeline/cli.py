"""The `deltaguard` command line."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deltaguard import defaults
from deltaguard.errors import DeltaGuardError
from deltaguard.tools.summary import replay_summary

POLICY_HELP = 'JSON thresholds and actions per category, e.g. {"categories": {"pii": {"action": "block"}}}'


def _threshold(text: str) -> tuple[str, float]:
    name, sep, value = text.partition("=")
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not sep or not name or not 0.0 <= number <= 1.0:
        raise argparse.ArgumentTypeError(f"expected CATEGORY=VALUE with VALUE in [0, 1], got {text!r}")
    return name, number


def _comma_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_parser() -> argparse.ArgumentParser:
    from deltaguard.classifiers.registry import DEFAULT_NAMES, parse_names
    from deltaguard.classifiers.vouched import add_vouch_option

    parser = argparse.ArgumentParser(prog="deltaguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    rp = sub.add_parser("replay", help="score every conversation of a transcript file turn by turn")
    rp.add_argument("file", type=Path, nargs="?", help="transcript file (JSONL, format v1)")
    rp.add_argument("--mode", choices=("delta", "full"), default="delta")
    rp.add_argument("--json", dest="json_out", type=Path, help="write the per-turn verdicts here")
    rp.add_argument(
        "--threshold",
        action="append",
        type=_threshold,
        default=[],
        metavar="CATEGORY=VALUE",
        help="override a category's threshold (repeatable)",
    )
    rp.add_argument("--policy", type=Path, metavar="FILE", help=POLICY_HELP)
    rp.add_argument("--no-progress", action="store_true", help="never show the progress bar")
    from deltaguard.tools.replay_diff import add_replay_options

    add_replay_options(rp)

    # No argparse defaults: a flag given overrides the configuration file and the
    # environment, one not given leaves them be (deltaguard.gateway.config_file).
    sp = sub.add_parser(
        "serve",
        help="the gateway (Responses API) with the safety stage attached",
        argument_default=argparse.SUPPRESS,
        epilog="Every gateway setting, flag or not (limits, timeouts, the metrics key, tenant "
        "concurrency), is also a key of the --config file and an environment variable "
        "DELTAGUARD_<SETTING>; `deltaguard config` prints them all (docs/hardening.md).",
    )
    sp.add_argument("--config", type=Path, metavar="FILE", help="a TOML file of settings")
    sp.add_argument("--host", help="bind address (default: loopback only)")
    sp.add_argument("--port", type=int)
    sp.add_argument("--upstream", help="'sim' (simulated model) or a Responses API base URL")
    sp.add_argument(
        "--upstream-mode",
        choices=("auto", "http"),
        help="auto: the upstream's WebSocket mode, only new items per turn (HTTP when it has none); "
        "http: the whole history over HTTP every turn",
    )
    sp.add_argument("--sim-tokens-per-s", type=float, help="simulated model speed")
    sp.add_argument(
        "--classifiers",
        type=parse_names,
        help=f"comma-separated classifier names (default: {','.join(DEFAULT_NAMES)})",
    )
    sp.add_argument(
        "--monitor",
        help="comma-separated classifiers to run beside inference instead of gating "
        "(the detector and the encoder always run there)",
    )
    sp.add_argument("--policy", type=Path, metavar="FILE", help=POLICY_HELP)
    add_vouch_option(sp)
    sp.add_argument(
        "--block-limit",
        type=int,
        metavar="N",
        help="after N turns of a conversation are blocked for injection, jailbreak or toxicity, "
        "refuse the rest of it (0: never)",
    )
    sp.add_argument(
        "--release-hold",
        choices=("actions", "all", "off"),
        help="what of the model's output waits for the monitor verdict on a turn's untrusted input",
    )
    sp.add_argument("--flags", help="append flag events to this JSONL file")
    sp.add_argument("--billing", help="append billing events to this JSONL file")
    sp.add_argument(
        "--billing-journal",
        metavar="PATH",
        help="keep each billing event in this file until its sink has it (none lost to a kill)",
    )
    sp.add_argument("--record", metavar="PATH", help="record flagged conversations to this SQLite file")
    sp.add_argument(
        "--record-no-redact", action="store_true", help="keep secret and PII values in the recordings"
    )
    sp.add_argument("--spool", help="where undeliverable events go")
    sp.add_argument(
        "--state",
        metavar="URL",
        help="where conversation state lives: memory:// (default, this process), sqlite:///PATH "
        "(survives restarts), redis://HOST:PORT/DB (shared by replicas)",
    )
    sp.add_argument(
        "--allowed-hosts",
        type=_comma_list,
        metavar="NAMES",
        help="comma-separated names a request's Host may carry ('*': any; default: the loopback "
        "names and --host); others are refused (DNS rebinding)",
    )
    sp.add_argument(
        "--allowed-origins",
        type=_comma_list,
        metavar="ORIGINS",
        help="comma-separated browser origins allowed besides the gateway's own ('*': any)",
    )
    sp.add_argument("--log-level")
    sp.add_argument(
        "--broker", help="kafka://HOST:PORT: publish turns and events to Kafka (distributed mode)"
    )
    sp.add_argument("--kafka-config", help="JSON file of KafkaSettings fields (topics, partitions, spool...)")

    gp = sub.add_parser(
        "config", help="print the effective gateway configuration, one setting a line, and where it came from"
    )
    gp.add_argument("--file", type=Path, metavar="FILE", help="a TOML file, as `serve --config` reads it")

    dp = sub.add_parser("demo", help="start the gateway and drive a scripted agent loop through it")
    dp.add_argument("--turns", type=int, default=24)
    dp.add_argument("--tool-tokens", type=int, default=800, help="size of each file the agent reads")
    dp.add_argument("--sim-tokens-per-s", type=float, default=1000.0)

    ep = sub.add_parser(
        "eval",
        help="measure the classifiers on labelled transcripts; thresholds for a target FPR, as a policy",
    )
    ep.add_argument("file", type=Path, help='transcript file whose lines carry labels {"categories": [...]}')
    ep.add_argument("--target-fpr", type=float, default=0.01, help="false-positive rate the thresholds meet")
    ep.add_argument("--out", type=Path, default=Path("eval/out/eval"), help="report, curves and policy.json")
    ep.add_argument("--policy", type=Path, metavar="FILE", help=POLICY_HELP)
    ep.add_argument("--classifiers", type=parse_names, default=DEFAULT_NAMES)
    add_vouch_option(ep, default=[])
    ep.add_argument("--no-plots", action="store_true", help="JSON, markdown and the policy file only")

    cp = sub.add_parser(
        "calibrate",
        help="eval on recorded traffic plus the labels marked on the review page; a policy for a target FPR",
    )
    cp.add_argument("store", type=Path, help="recording store (serve --record PATH)")
    cp.add_argument("--target-fpr", type=float, default=0.01, help="false-positive rate the thresholds meet")
    cp.add_argument(
        "--out", type=Path, default=Path("eval/out/calibrate"), help="report, curves, policy.json"
    )
    cp.add_argument("--policy", type=Path, metavar="FILE", help=POLICY_HELP)
    cp.add_argument("--classifiers", type=parse_names, default=DEFAULT_NAMES)
    add_vouch_option(cp, default=[])
    cp.add_argument("--no-plots", action="store_true", help="JSON, markdown and the policy file only")

    vp = sub.add_parser("review", help="a local web page to review recorded flags and mark false positives")
    vp.add_argument("store", type=Path, help="recording store (serve --record PATH)")
    vp.add_argument("--host", default=defaults.HOST, help="a loopback address (the page binds nothing else)")
    vp.add_argument("--port", type=int, default=8401)
    vp.add_argument("--export", type=Path, metavar="FILE", help="write the reviewed recordings here and exit")
    add_vouch_option(vp, default=[])
    vp.add_argument("--log-level", default="info")

    from deltaguard.kafka.command import add_worker_parser

    add_worker_parser(sub)
    from deltaguard.tools.bench import add_bench_parser

    add_bench_parser(sub)
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    from deltaguard.classifiers.registry import parse_names
    from deltaguard.gateway.config_file import effective
    from deltaguard.gateway.process import fix_mmap_threshold, limit_malloc_arenas
    from deltaguard.gateway.server import scorer_for, serve
    from deltaguard.review import review_routes

    limit_malloc_arenas()  # before the models load and any thread starts
    fix_mmap_threshold()

    flags = {field: getattr(args, dest) for dest, field in SERVE_FLAGS.items() if hasattr(args, dest)}
    if "monitor_classifiers" in flags:
        flags["monitor_classifiers"] = parse_names(flags["monitor_classifiers"])
    if "vouch" in flags:
        flags["vouch"] = tuple(flags["vouch"])
    if "block_limit" in flags:
        flags["block_limit"] = flags["block_limit"] or None
    if "policy_path" in flags:
        flags["policy_path"] = str(flags["policy_path"])
    if "record_redact" in flags:
        flags["record_redact"] = not flags["record_redact"]
    config, _sources = effective(getattr(args, "config", None), flags)
    scorer = scorer_for(config)
    # The review page rides along with the recording, behind the same tenant keys.
    routes = review_routes(config.record_path, config.api_keys, scorer) if config.record_path else []
    serve(config, scorer, log_level=getattr(args, "log_level", "info"), routes=routes)
    return 0


# serve's flags (argparse dest) -> GatewayConfig fields
SERVE_FLAGS = {
    "host": "host",
    "port": "port",
    "upstream": "upstream",
    "upstream_mode": "upstream_mode",
    "sim_tokens_per_s": "sim_tokens_per_s",
    "classifiers": "classifiers",
    "monitor": "monitor_classifiers",
    "block_limit": "block_limit",
    "release_hold": "release_hold",
    "policy": "policy_path",
    "vouch": "vouch",
    "flags": "flags_path",
    "billing": "billing_path",
    "billing_journal": "billing_journal_path",
    "record": "record_path",
    "record_no_redact": "record_redact",
    "spool": "spool_path",
    "state": "state",
    "allowed_hosts": "allowed_hosts",
    "allowed_origins": "allowed_origins",
    "broker": "broker",
    "kafka_config": "kafka_config",
}


def cmd_config(args: argparse.Namespace) -> int:
    from deltaguard.gateway.config_file import describe, effective

    config, sources = effective(args.file)
    print("\n".join(describe(config, sources)))
    return 0


def worker_args(args: argparse.Namespace, environ: Any = None) -> argparse.Namespace:
    """The worker's arguments with the gateway's settings laid under them: `--config F.toml`
    is the file `serve --config` reads (its `broker`, `kafka_config` and `classifiers`), and
    DELTAGUARD_BROKER and the like apply as they do to serve; flags still win. Any other
    `--config` is a JSON file of KafkaSettings, as before."""
    from deltaguard.gateway.config_file import effective

    toml = args.config if args.config is not None and args.config.suffix == ".toml" else None
    flags = {k: v for k, v in (("broker", args.broker), ("classifiers", args.classifiers)) if v is not None}
    config, sources = effective(toml, flags, environ)
    out = argparse.Namespace(**vars(args))
    if sources["broker"] != "default":
        out.broker = config.broker
    if sources["classifiers"] != "default":
        out.classifiers = config.classifiers
    if toml is not None:
        out.config = Path(config.kafka_config) if config.kafka_config else None
    return out


def cmd_demo(args: argparse.Namespace) -> int:
    from deltaguard.tools.demo import main as demo_main

    return demo_main(args.turns, args.tool_tokens, args.sim_tokens_per_s)


def cmd_replay(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from deltaguard.tools.replay import replay
    from deltaguard.tools.replay_diff import cmd_replay_store, replay_scorer
    from deltaguard.transcripts import count_lines, read_transcripts

    if args.from_store is not None:
        return cmd_replay_store(args)
    if args.file is None or args.diff:
        print(
            "deltaguard replay: give a transcript FILE, or --from-store PATH (needed by --diff)",
            file=sys.stderr,
        )
        return 2
    if not args.file.is_file():
        print(f"deltaguard replay: {args.file}: no such file", file=sys.stderr)
        return 2
    scorer = replay_scorer(args)
    show = sys.stderr.isatty() and not args.no_progress
    with tqdm(total=count_lines(args.file), unit="conv", disable=not show, file=sys.stderr) as bar:
        result = replay(read_transcripts(args.file), scorer, args.mode, on_line=lambda: bar.update(1))
    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    if args.json_out:
        args.json_out.write_text(json.dumps(result.to_json(), ensure_ascii=False) + "\n", encoding="utf-8")
    print(replay_summary(result))
    return 1 if result.errors else 0


def _check_target(command: str, target: float) -> bool:
    if 0.0 <= target < 1.0:
        return True
    print(f"deltaguard {command}: --target-fpr must be in [0, 1)", file=sys.stderr)
    return False


def _eval_scorer(args: argparse.Namespace) -> Any:
    from deltaguard.state.loading import build_scorer
    from deltaguard.state.policy import load_policy

    policy = load_policy(args.policy) if args.policy else None
    return build_scorer(args.classifiers, policy=policy, vouch=args.vouch)


def _eval_outputs(result: Any, args: argparse.Namespace, scorer: Any, what: str) -> int:
    """What eval and calibrate print and write, from one `EvalResult`."""
    from deltaguard.tools.eval_output import write_outputs
    from deltaguard.tools.evaluate import markdown

    for err in result.errors:
        print(f"error: {err}", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    paths = write_outputs(result, args.out, scorer.policy, plots=not args.no_plots)
    print(markdown(result, limit=20))
    print(f"\n{len(result.conversations)} {what}; wrote " + ", ".join(str(p) for p in paths.values()))
    return 1 if result.errors else 0


def cmd_eval(args: argparse.Namespace) -> int:
    from deltaguard.tools.evaluate import evaluate

    if not args.file.is_file():
        print(f"deltaguard eval: {args.file}: no such file", file=sys.stderr)
        return 2
    if not _check_target("eval", args.target_fpr):
        return 2
    scorer = _eval_scorer(args)
    return _eval_outputs(evaluate(args.file, scorer, args.target_fpr), args, scorer, "labelled conversations")


def cmd_calibrate(args: argparse.Namespace) -> int:
    from deltaguard.tools.calibrate import calibrate

    if not args.store.is_file():
        print(f"deltaguard calibrate: {args.store}: no such recording store", file=sys.stderr)
        return 2
    if not _check_target("calibrate", args.target_fpr):
        return 2
    scorer = _eval_scorer(args)
    result = calibrate(args.store, scorer, args.target_fpr)
    sources = result.scores_from or {}
    what = (
        f"reviewed recordings ({result.unlabelled} left out: not every flag marked; scores as recorded "
        f"for {sources.get('recorded', 0)}, replayed for {sources.get('replayed', 0)})"
    )
    return _eval_outputs(result, args, scorer, what)


def cmd_review(args: argparse.Namespace) -> int:
    from deltaguard.gateway.config import api_keys_from_env
    from deltaguard.review import export_reviewed, serve_review
    from deltaguard.review.server import check_loopback
    from deltaguard.state.loading import build_scorer

    if not args.store.is_file():
        print(f"deltaguard review: {args.store}: no such recording store", file=sys.stderr)
        return 2
    if args.export is not None:
        written, left_out = export_reviewed(args.store, args.export)
        print(f"wrote {written} reviewed recordings to {args.export} ({left_out} not reviewed, left out)")
        return 0
    check_loopback(args.host)
    print(f"review page: http://{args.host}:{args.port}/review", file=sys.stderr)
    scorer = functools.partial(build_scorer, vouch=args.vouch)  # loaded when a replay asks
    serve_review(args.store, args.host, args.port, api_keys_from_env(), scorer, args.log_level)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "replay":
            return cmd_replay(args)
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "demo":
            return cmd_demo(args)
        if args.command == "config":
            return cmd_config(args)
        if args.command == "eval":
            return cmd_eval(args)
        if args.command == "calibrate":
            return cmd_calibrate(args)
        if args.command == "review":
            return cmd_review(args)
        if args.command == "bench":
            from deltaguard.tools.bench import cmd_bench

            return cmd_bench(args)
        if args.command == "worker":
            from deltaguard.kafka.command import cmd_worker

            return cmd_worker(worker_args(args))
    except DeltaGuardError as exc:
        print(f"deltaguard {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())

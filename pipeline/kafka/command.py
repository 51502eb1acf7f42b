"""`deltaguard worker`: its arguments and body (pipeline/cli.py delegates here).

Importing this module is cheap: faust and the classifiers load only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from deltaguard.kafka.settings import KafkaSettings


def add_worker_parser(sub: Any) -> None:
    """Add the `worker` subcommand to the CLI's subparsers."""
    from deltaguard.classifiers.registry import parse_names
    from deltaguard.classifiers.vouched import add_vouch_option

    wk = sub.add_parser("worker", help="run a monitor-lane worker on Kafka (faust-streaming)")
    wk.add_argument("--broker", help="kafka://HOST:PORT (overrides --config)")
    wk.add_argument(
        "--classifiers",
        type=parse_names,
        help="comma-separated classifier names (default: the default set)",
    )
    wk.add_argument(
        "--config",
        type=Path,
        help="the gateway's TOML file (serve --config: broker, kafka_config, classifiers), "
        "or a JSON file of KafkaSettings fields",
    )
    add_vouch_option(wk, default=[])
    wk.add_argument("--data-dir", type=Path, help="faust data directory (default: a temporary one)")
    wk.add_argument(
        "--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on 127.0.0.1:PORT/metrics"
    )
    wk.add_argument("--loglevel", default="info", choices=("debug", "info", "warning", "error"))


def worker_settings(args: argparse.Namespace) -> KafkaSettings:
    overrides: dict[str, Any] = {"broker": args.broker, "data_dir": args.data_dir}
    if args.metrics_port is not None:
        overrides |= {"web_enabled": True, "web_port": args.metrics_port}
    if args.config is not None:
        return KafkaSettings.from_file(args.config, **overrides)
    return KafkaSettings.model_validate({k: v for k, v in overrides.items() if v is not None})


def cmd_worker(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from deltaguard.classifiers.registry import DEFAULT_NAMES

    try:
        settings = worker_settings(args)
    except (ValidationError, OSError) as exc:
        print(f"deltaguard worker: bad settings: {exc}", file=sys.stderr)
        return 2
    try:
        from deltaguard.kafka.worker import run_worker
    except ModuleNotFoundError as exc:
        print(f"deltaguard worker: {exc.name} is missing: pip install 'deltaguard[kafka]'", file=sys.stderr)
        return 2
    return run_worker(settings, args.classifiers or DEFAULT_NAMES, loglevel=args.loglevel, vouch=args.vouch)

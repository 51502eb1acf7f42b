"""`deltaguard worker` reads the gateway's TOML file (`serve --config`), the environment and
its flags, in that order, as serve does; a JSON `--config` is still KafkaSettings."""

from __future__ import annotations

import json

from deltaguard.cli import build_parser, main, worker_args
from deltaguard.kafka.command import worker_settings


def parse(*argv: str):
    return build_parser().parse_args(["worker", *argv])


def test_the_worker_reads_the_file_serve_reads(tmp_path):
    kafka = tmp_path / "kafka.json"
    kafka.write_text(json.dumps({"turns_partitions": 4}))
    toml = tmp_path / "deltaguard.toml"
    toml.write_text(
        f'broker = "kafka://127.0.0.1:19092"\nkafka_config = "{kafka}"\nclassifiers = ["secrets", "pii"]\n'
    )
    args = worker_args(parse("--config", str(toml)), environ={})
    assert (args.broker, args.classifiers) == ("kafka://127.0.0.1:19092", ("secrets", "pii"))
    assert args.config == kafka  # the KafkaSettings file the TOML names
    settings = worker_settings(args)
    assert settings.bootstrap_servers == "127.0.0.1:19092" and settings.turns_partitions == 4
    # The environment over the file, a flag over both.
    env = {"DELTAGUARD_BROKER": "kafka://127.0.0.1:29092"}
    assert worker_settings(worker_args(parse("--config", str(toml)), environ=env)).bootstrap_servers == (
        "127.0.0.1:29092"
    )
    flagged = worker_args(parse("--config", str(toml), "--broker", "kafka://127.0.0.1:39092"), environ=env)
    assert worker_settings(flagged).bootstrap_servers == "127.0.0.1:39092"


def test_a_json_config_is_still_kafka_settings(tmp_path):
    kafka = tmp_path / "kafka.json"
    kafka.write_text(json.dumps({"broker": "kafka://127.0.0.1:19093", "flags_partitions": 2}))
    args = worker_args(parse("--config", str(kafka)), environ={})
    assert args.config == kafka and args.broker is None
    settings = worker_settings(args)
    assert settings.bootstrap_servers == "127.0.0.1:19093" and settings.flags_partitions == 2


def test_a_misspelt_key_stops_the_worker_naming_the_nearest(tmp_path, capsys):
    toml = tmp_path / "deltaguard.toml"
    toml.write_text('brocker = "kafka://127.0.0.1:19092"\n')
    assert main(["worker", "--config", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'brocker'" in err and "did you mean 'broker'?" in err

"""deltaguard.gateway.config_file and `deltaguard config` / `serve --config`."""

from __future__ import annotations

import pytest

from deltaguard import cli
from deltaguard.gateway.app import create_app
from deltaguard.gateway.config_file import ConfigError, describe, effective
from deltaguard.state.scoring import Scorer
from tests.support.toy import ItemCounter


def toml(tmp_path, text):
    path = tmp_path / "deltaguard.toml"
    path.write_text(text)
    return path


def test_defaults_then_file_then_environment_then_flags(tmp_path):
    path = toml(tmp_path, 'port = 9000\nstate = "sqlite:///s.db"\nclassifiers = ["secrets", "pii"]\n')
    env = {"DELTAGUARD_PORT": "9100", "DELTAGUARD_RELEASE_HOLD": "all", "DELTAGUARD_OTHER": "x"}
    config, sources = effective(path, {"release_hold": "off"}, env)
    assert (config.port, config.state, config.classifiers, config.release_hold) == (
        9100,
        "sqlite:///s.db",
        ("secrets", "pii"),
        "off",
    )
    assert sources["port"] == "env DELTAGUARD_PORT" and sources["state"] == f"file {path}"
    assert sources["release_hold"] == "flag" and sources["host"] == "default"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('stae = "memory://"\n', "unknown key 'stae' (did you mean 'state'?)"),
        ("port = [\n", "deltaguard.toml"),
        ('port = "many"\n', "port (file"),
        ('state = "postgres://db/0"\n', "state (file"),
        ('monitor_verdict_late = "ignore"\n', "monitor_verdict_late (file"),
        ("monitor_verdict_wait_s = -1\n", "monitor_verdict_wait_s (file"),
        ("billing_journal_every_tokens = 0\n", "billing_journal_every_tokens (file"),
    ],
)
def test_a_file_that_cannot_be_used_names_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as info:
        effective(toml(tmp_path, text), environ={})
    assert message in str(info.value)


def test_the_description_has_every_setting_its_source_and_no_secret(tmp_path):
    config, sources = effective(
        None, {"upstream_api_key": "sk-live-123", "api_keys": {"k1": "tenant-a"}}, environ={}
    )
    text = "\n".join(describe(config, sources))
    assert "sk-live-123" not in text and "k1" not in text
    assert 'upstream_api_key = "***"  # flag' in text
    assert "port = 8400  # default" in text and "# broker is unset  # default" in text


def test_config_command_prints_and_refuses_unknown_keys(tmp_path, capsys):
    assert cli.main(["config", "--file", str(toml(tmp_path, "port = 9001\n"))]) == 0
    assert f"port = 9001  # file {tmp_path / 'deltaguard.toml'}" in capsys.readouterr().out
    assert cli.main(["config", "--file", str(toml(tmp_path, "prot = 1\n"))]) == 2
    assert "unknown key 'prot' (did you mean 'port'?)" in capsys.readouterr().err


def test_serve_reads_the_file_and_its_flags_win(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr("deltaguard.gateway.server.serve", lambda config, *a, **k: seen.update(config=config))
    monkeypatch.setattr("deltaguard.gateway.server.scorer_for", lambda config: None)
    path = toml(tmp_path, 'port = 9000\nhost = "127.0.0.2"\nrelease_hold = "all"\n')
    argv = ["serve", "--config", str(path), "--port", "9005", "--monitor", "pii", "--block-limit", "0"]
    assert cli.main(argv) == 0
    config = seen["config"]
    assert (config.port, config.host, config.release_hold) == (9005, "127.0.0.2", "all")
    assert config.monitor_classifiers == ("pii",) and config.block_limit is None


def test_the_replica_and_journal_settings_reach_the_stage_and_the_description(tmp_path, capsys):
    text = (
        'monitor_verdict_wait_s = 2.5\nmonitor_verdict_late = "refuse"\n'
        "billing_journal_every_tokens = 32\nbilling_journal_every_s = 0.25\n"
    )
    config, _ = effective(toml(tmp_path, text), environ={})
    assert (config.verdict_wait().deadline_s, config.verdict_wait().late) == (2.5, "refuse")
    assert (config.journal_cadence().every_tokens, config.journal_cadence().every_s) == (32, 0.25)
    stage = create_app(config, Scorer([ItemCounter()])).state.gateway.stage
    assert stage.lockout.verdicts.policy == config.verdict_wait()
    assert stage.config.journal_cadence == config.journal_cadence()
    assert cli.main(["config", "--file", str(tmp_path / "deltaguard.toml")]) == 0
    out = capsys.readouterr().out
    assert (
        'monitor_verdict_late = "refuse"  # file' in out and "billing_journal_every_s = 0.25  # file" in out
    )

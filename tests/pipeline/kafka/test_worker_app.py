"""The faust app of a worker, built without a broker: settings, patches, CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("faust")

from deltaguard.cli import main
from deltaguard.kafka.settings import KafkaSettings
from deltaguard.kafka.worker import ConversationTable, build_worker_app, faust_options
from deltaguard.state.loading import build_scorer

REPO = Path(__file__).resolve().parents[3]


def test_library_modules_do_not_import_faust():
    code = (
        "import sys; import deltaguard.kafka, deltaguard.kafka.settings, deltaguard.kafka.sink, "
        "deltaguard.kafka.subscriber, deltaguard.kafka.monitor, deltaguard.kafka.topics, "
        "deltaguard.kafka.command, deltaguard.cli; assert 'faust' not in sys.modules, 'faust imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_faust_options_keep_the_web_server_off_or_on_loopback(tmp_path: Path):
    off = faust_options(KafkaSettings(data_dir=tmp_path))
    assert off["web_enabled"] is False
    on = faust_options(KafkaSettings(data_dir=tmp_path, web_enabled=True, web_port=16066))
    assert on["web_enabled"] is True and on["web_bind"] == "127.0.0.1" and on["web_port"] == 16066
    assert off["topic_allow_declare"] is False  # topics come from ensure_topics
    assert "producer_max_batch_size" not in off
    assert (
        faust_options(KafkaSettings(data_dir=tmp_path, producer_max_batch_size=1))["producer_max_batch_size"]
        == 1
    )


async def test_fetch_wait_reaches_the_aiokafka_consumer(tmp_path: Path):
    settings = KafkaSettings(data_dir=tmp_path, fetch_max_wait_ms=37)
    app, _ = build_worker_app(settings, build_scorer(names=("secrets",)))
    thread = app.consumer._thread
    consumer = thread._create_worker_consumer(app.transport)
    try:
        assert consumer._fetch_max_wait_ms == 37  # faust alone passes 1500
    finally:
        await consumer.stop()


async def test_table_write_names_the_changelog_partition(tmp_path: Path):
    _, worker = build_worker_app(KafkaSettings(data_dir=tmp_path), build_scorer(names=("secrets",)))
    table = worker.table
    assert isinstance(table, ConversationTable)
    with table._partition(3):
        assert table.partition_for_key("conv") == 3
    with pytest.raises(TypeError, match="outside of stream"):
        table.partition_for_key("conv")  # faust's own rule, outside a batch write


def test_cli_worker_rejects_bad_settings(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["worker", "--broker", "localhost:9092"]) == 2
    assert "kafka://HOST:PORT" in capsys.readouterr().err
    bad = tmp_path / "s.json"
    bad.write_text('{"turns_partitions": 0}', encoding="utf-8")
    assert main(["worker", "--config", str(bad)]) == 2


def test_settings_from_file_with_overrides(tmp_path: Path):
    path = tmp_path / "s.json"
    path.write_text('{"broker": "kafka://10.0.0.1:9092", "turns_partitions": 12}', encoding="utf-8")
    s = KafkaSettings.from_file(path, broker="kafka://127.0.0.1:1234")
    assert s.bootstrap_servers == "127.0.0.1:1234" and s.turns_partitions == 12
    assert s.topic_partitions()[s.changelog_topic] == 12  # co-partitioned with the turns
    multi = KafkaSettings(broker="kafka://127.0.0.1:1;kafka://127.0.0.1:2")
    assert multi.bootstrap_servers == "127.0.0.1:1,127.0.0.1:2"

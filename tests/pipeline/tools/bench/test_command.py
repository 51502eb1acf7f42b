"""`deltaguard bench` from the command line: the files it writes, a transcript file measured."""

from __future__ import annotations

import json

from deltaguard.cli import main

SAMPLE = "eval/samples/demo.jsonl"


def test_the_cli_writes_its_files_and_the_figure(tmp_path, capsys):
    out = tmp_path / "out"
    figure = tmp_path / "figures" / "bench_delta.png"
    argv = ["bench", "--turns", "4", "--tool-tokens", "30", "--out", str(out), "--figure", str(figure)]
    assert main([*argv, "--no-progress", "--clock", "cpu"]) == 0
    assert figure.stat().st_size > 0 and (out / "bench.json").is_file()
    assert json.loads((out / "bench.json").read_text())["config"]["clock"] == "cpu"
    assert "full_over_delta_at_turn" in capsys.readouterr().out


def test_the_cli_measures_a_transcript_file(tmp_path):
    out = tmp_path / "out"
    assert main(["bench", "--transcript", SAMPLE, "--out", str(out), "--no-plots", "--no-progress"]) == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["summary"]["conversations"] == 5 and data["summary"]["verdict_mismatches"] == []
    assert not (out / "bench.png").exists()
    assert main(["bench", "--transcript", str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2

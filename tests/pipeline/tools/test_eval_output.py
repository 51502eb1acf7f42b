"""What `deltaguard eval` writes: SVG curves without a plotting library, all files or none."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from deltaguard.cli import main

SVG = "{http://www.w3.org/2000/svg}"


def points(svg: ET.Element, category: str) -> list[tuple[float, float]]:
    (line,) = [p for p in svg.iter(f"{SVG}polyline") if p.get("data-category") == category]
    return [tuple(float(v) for v in xy.split(",")) for xy in line.get("points", "").split()]


def test_curves_are_svg_from_the_quickstart_install(scorer, labelled, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as installed without the bench extra
    out = tmp_path / "out"
    assert main(["eval", str(labelled), "--target-fpr", "0.1", "--out", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    assert written == ["eval.json", "eval.md", "policy.json", "pr.svg", "roc.svg"]
    roc = ET.parse(out / "roc.svg").getroot()
    assert roc.tag == f"{SVG}svg" and "ROC" in "".join(roc.itertext())
    curve = points(roc, "prompt_injection")
    # Pixels: the origin is bottom left; every injection outscores every benign page (AUC 1),
    # so the curve climbs the left edge to recall 1 before it moves right.
    (x0, y0), (x_end, y_end) = curve[0], curve[-1]
    assert x_end > x0 and y_end < y0
    assert (x0, y_end) in curve
    pr = ET.parse(out / "pr.svg").getroot()
    assert len(points(pr, "prompt_injection")) >= 2


def test_a_run_that_cannot_write_everything_writes_nothing(scorer, labelled, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "roc.svg").mkdir(parents=True)  # in the way of one of the files
    assert main(["eval", str(labelled), "--target-fpr", "0.1", "--out", str(out)]) == 2
    assert "nothing was written" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["roc.svg"]  # no report, no policy, no staging

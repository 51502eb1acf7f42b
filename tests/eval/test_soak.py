"""The soak harness, briefly: it drives a live gateway with both tenants and the attacks,
shuts it down with turns in flight, and accounts for every billing event."""

from __future__ import annotations

import json

from eval.soak import main


def test_a_short_soak_loses_and_doubles_no_billing_event(tmp_path):
    out = tmp_path / "soak.json"
    assert main(["--duration", "24", "--large-every", "5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    billing = report["billing"]
    assert billing["responses_to_bill"] > 50 and billing["lost"] == 0 and billing["doubled"] == 0
    assert billing["billed_unseen_by_client"] == 0
    outcomes = report["outcomes"]
    assert outcomes.get("attack:large 200 ok", 0) >= 1 and report["secrets_in_store"] == []
    assert not any(" 5" in key for key in outcomes), outcomes  # no 5xx
    assert set(report["latency"]) >= {"steady_unloaded", "steady_loaded", "steady_p99_ratio"}
    assert report["gateway_exit_code"] == 0 and report["rss_mb"]["samples"]

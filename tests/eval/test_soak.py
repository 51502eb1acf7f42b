"""The soak harness, briefly: it drives a live gateway with both tenants and the attacks,
shuts it down with turns in flight, and accounts for every billing event."""

from __future__ import annotations

import json

from eval.soak import floor_slope, main, stores_filled


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
    latency = report["latency"]
    assert set(latency) >= {"steady_unloaded", "steady_loaded", "steady_p99_ratio", "steady_windows"}
    assert sum(w["n"] for w in latency["steady_windows"]) == latency["steady_loaded"]["n"]
    slow = latency["steady_slow"]  # each slow request names what it overlapped, if only "none"
    assert slow["n"] == 0 or sum(slow["overlapping"].values()) >= slow["n"]
    assert report["rss_mb"]["after_warmup_spread"] is not None
    assert any("gate/responses" in held and held["gate/responses"] > 0 for _, held in report["state_mb"])
    assert report["gateway_exit_code"] == 0 and report["rss_mb"]["samples"]


def test_the_floor_of_rss_ignores_a_large_request_in_flight_and_finds_a_leak():
    level = [(t * 5.0, 500.0 + (100.0 if t % 7 == 3 else 0.0)) for t in range(60)]  # spikes, no growth
    assert floor_slope(level, 0.0) == 0.0
    leak = [(t * 5.0, 500.0 + t * 0.5) for t in range(60)]  # 0.5 MB per 5 s sample
    assert floor_slope(leak, 0.0) == 6.0
    assert floor_slope(leak[:10], 0.0) is None  # under three 30 s windows
    cut = [*level[:54], (270.0, 900.0)]  # the run ends one sample into a window, a request in flight
    assert floor_slope(cut, 0.0) == 0.0


def test_rss_is_judged_from_when_the_stores_are_full():
    state = [(t * 15.0, {"gate/snapshots": min(t, 20) * 0.5, "gate/responses": 16.0}) for t in range(40)]
    # the stores hold 26 MiB at most, 95% of it (24.7) from t = 18, 270 s
    assert stores_filled(state, after=120.0) == 270.0
    assert stores_filled(state, after=400.0) == 405.0  # never before the warm-up's end
    assert stores_filled([], after=120.0) == 120.0

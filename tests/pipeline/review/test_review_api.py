"""The review API on a real gateway (`serve --record`), the `review` and `calibrate` commands,
and the store's schema migration."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest

from deltaguard.cli import main
from deltaguard.errors import DeltaGuardError
from deltaguard.gateway.server import free_port
from deltaguard.recording import SCHEMA_VERSION, TranscriptStore, read_recorded
from deltaguard.review import review_app
from deltaguard.review.server import check_loopback
from deltaguard.tools.calibrate import calibrate
from deltaguard.tools.evaluate import evaluate
from tests.pipeline.review.conftest import AWS_KEY, EMAIL, INJECTED_LINE

A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}


def by_category(rows, category):
    return next(r for r in rows if category in r["categories"])


def test_tenant_keys_scope_and_filters(review_gateway):
    base, _ = review_gateway
    api = base + "/review/api"
    assert httpx.get(api + "/conversations").status_code == 401
    wrong = httpx.get(api + "/conversations", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    # The page itself holds no data: served without a key, from the app (no CDN).
    page = httpx.get(base + "/review")
    assert page.status_code == 200 and "/review/static/review.js" in page.text and "http" not in page.text
    assert httpx.get(base + "/review/static/review.js").headers["content-type"].startswith("text/javascript")
    assert httpx.get(base + "/review/static/../app.py").status_code == 404

    rows_a = httpx.get(api + "/conversations", headers=A).json()
    assert rows_a["total"] == 2 and rows_a["tenants"] == ["tenant-a"]  # never tenant-b's
    rows_b = httpx.get(api + "/conversations", headers=B).json()["conversations"]
    assert [(r["decision"], r["categories"]) for r in rows_b] == [("block", ["secrets"])]
    blocked = httpx.get(api + "/conversations?decision=block", headers=A).json()["conversations"]
    assert [r["categories"] for r in blocked] == [["prompt_injection", "jailbreak"]]
    pii = httpx.get(api + "/conversations?category=pii", headers=A).json()["conversations"]
    assert [r["decision"] for r in pii] == ["flag"]
    assert (
        httpx.get(api + f"/conversations?since={time.time() + 60}", headers=A).json()["conversations"] == []
    )
    assert (
        len(httpx.get(api + f"/conversations?until={time.time() + 60}", headers=A).json()["conversations"])
        == 2
    )
    # Another tenant's recording does not exist for this key.
    other = rows_b[0]["id"]
    assert httpx.get(api + f"/conversations/{other}", headers=A).status_code == 404


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ("decision=allow", "decision"),
        ("category=spam", "category"),
        ("since=yesterday", "since"),
        ("since=10&until=5", "since"),
        ("colour=red", "colour"),
    ],
)
def test_a_bad_filter_is_named(review_gateway, query, param):
    base, _ = review_gateway
    r = httpx.get(base + "/review/api/conversations?" + query, headers=A)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_detail_highlights_the_item_that_raised_the_flag(review_gateway):
    base, _ = review_gateway
    api = base + "/review/api"
    row = by_category(
        httpx.get(api + "/conversations", headers=A).json()["conversations"], "prompt_injection"
    )
    d = httpx.get(api + f"/conversations/{row['id']}", headers=A).json()
    assert d["flag_turns"] == {"prompt_injection": 1, "jailbreak": 1} and len(d["turns"]) == 2
    flagged = [(t["index"], i["kind"]) for t in d["turns"] for i in t["items"] if i["flagged"]]
    # the fetched page (injection) and the user's own jailbreak, not the user's first request
    assert flagged == [(1, "function_call_output"), (1, "message")]
    assert [t["category_scores"]["prompt_injection"] >= 0.5 for t in d["turns"]] == [False, True]

    secrets = httpx.get(api + "/conversations", headers=B).json()["conversations"][0]
    d = httpx.get(api + f"/conversations/{secrets['id']}", headers=B).json()
    assert d["redacted"] and AWS_KEY not in json.dumps(d)
    (marked,) = [i for t in d["turns"] for i in t["items"] if "secrets" in i["flagged"]]
    assert "[REDACTED:aws_access_key_id]" in marked["text"]
    previews = [f["preview"] for t in d["turns"] for f in t["findings"]]
    assert "[REDACTED:aws_access_key_id]" in previews

    pii = by_category(httpx.get(api + "/conversations", headers=A).json()["conversations"], "pii")
    d = httpx.get(api + f"/conversations/{pii['id']}", headers=A).json()
    assert EMAIL not in json.dumps(d)
    assert [i["text"] for t in d["turns"] for i in t["items"] if i["flagged"] == ["pii"]] == [
        "Write to [REDACTED:email] about the invoice."
    ]


def test_labels_are_stored_exported_and_calibrated(review_gateway, scorer, tmp_path):
    base, db = review_gateway
    api = base + "/review/api"
    rows = httpx.get(api + "/conversations", headers=A).json()["conversations"]
    inj, pii = by_category(rows, "prompt_injection"), by_category(rows, "pii")
    url = api + f"/conversations/{inj['id']}/labels/prompt_injection"
    bad = httpx.put(url, json={"verdict": "maybe"}, headers=A)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "verdict"
    wrong = httpx.put(
        api + f"/conversations/{inj['id']}/labels/pii", json={"verdict": "confirmed"}, headers=A
    )
    assert wrong.status_code == 400 and "not flagged for 'pii'" in wrong.json()["error"]["message"]
    malformed = httpx.put(url, content=b"{", headers={**A, "Content-Type": "application/json"})
    assert malformed.json()["error"]["code"] == "invalid_json"
    assert httpx.put(url, json={"verdict": "confirmed"}, headers=B).status_code == 404

    assert httpx.put(url, json={"verdict": "confirmed"}, headers=A).status_code == 200
    half = httpx.get(api + "/export", headers=A)
    assert half.headers["x-deltaguard-unreviewed"] == "2"  # jailbreak is not marked yet
    jb = api + f"/conversations/{inj['id']}/labels/jailbreak"
    assert httpx.put(jb, json={"verdict": "false_positive"}, headers=A).status_code == 200
    r = httpx.put(
        api + f"/conversations/{pii['id']}/labels/pii", json={"verdict": "false_positive"}, headers=A
    )
    assert r.json()["labels"]["pii"]["verdict"] == "false_positive"
    assert r.json()["labels"]["pii"]["reviewer"] == "tenant-a"

    export = httpx.get(api + "/export", headers=A)
    assert export.headers["x-deltaguard-unreviewed"] == "0"
    lines = [json.loads(x) for x in export.text.splitlines()]
    labels = {line["id"]: line["labels"] for line in lines}
    assert labels[inj["conversation_id"]] == {
        "categories": ["prompt_injection"],
        "review": {"prompt_injection": "confirmed", "jailbreak": "false_positive"},
        "turn": 1,
    }
    assert labels[pii["conversation_id"]]["categories"] == []
    path = tmp_path / "reviewed.jsonl"
    path.write_text(export.text)
    report = evaluate(path, scorer, target_fpr=0.5).reports["prompt_injection"]  # `deltaguard eval` reads it
    assert (report.positives, report.negatives, report.true_positives) == (1, 1, 1)

    # calibrate: the same report from the store; tenant-b's recording is unreviewed, left out.
    result = calibrate(db, scorer, target_fpr=0.5)
    assert result.unlabelled == 1 and len(result.conversations) == 2
    assert result.reports["prompt_injection"].to_json() == report.to_json()
    out = tmp_path / "cal"
    assert main(["calibrate", str(db), "--target-fpr", "0.5", "--out", str(out), "--no-plots"]) == 0
    written = json.loads((out / "eval.json").read_text())
    assert written["unlabelled"] == 1 and written["conversations"] == 2
    # One benign conversation per category is too few for any threshold at this target.
    assert json.loads((out / "policy.json").read_text()) == {"categories": {}}
    assert written["categories"]["prompt_injection"] == report.to_json()

    # Clearing a mark makes the recording unreviewed again.
    assert list(httpx.put(url, json={"verdict": None}, headers=A).json()["labels"]) == ["jailbreak"]
    assert calibrate(db, scorer).unlabelled == 2


def test_calibrate_with_no_review_says_what_to_do(tmp_path, scorer):
    db = tmp_path / "empty.db"
    TranscriptStore(db).open().close()
    with pytest.raises(DeltaGuardError, match="review page"):
        calibrate(db, scorer)
    assert main(["calibrate", str(tmp_path / "missing.db")]) == 2


def test_a_version_1_store_is_migrated_and_stays_readable(review_gateway, tmp_path):
    _, db = review_gateway
    old = tmp_path / "v1.db"
    with sqlite3.connect(db) as src, sqlite3.connect(old) as dst:
        src.backup(dst)
    with sqlite3.connect(old) as v1:  # as DeltaGuard wrote it before the labels table
        v1.execute("DROP TABLE labels")
        v1.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    with TranscriptStore(old).open(create=False) as store:
        assert len(store.read()) == 3
        rid = store.read()[0].id
        store.set_label(rid, store.read()[0].categories[0], "confirmed", None)
        assert store.labels([rid])[rid]
        (version,) = store.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert int(version) == SCHEMA_VERSION == 2
    with sqlite3.connect(old) as newer:
        newer.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(DeltaGuardError, match="schema version 3"):
        read_recorded(old)


def test_loopback_only(review_gateway):
    from starlette.testclient import TestClient

    _, db = review_gateway
    with pytest.raises(DeltaGuardError, match="loopback"):
        check_loopback("0.0.0.0")
    check_loopback("127.0.0.1")
    check_loopback("::1")
    assert main(["review", str(db), "--host", "0.0.0.0"]) == 2
    # A client from any other address is refused, page and API alike.
    with TestClient(review_app(db), base_url="http://localhost", client=("192.0.2.7", 5000)) as client:
        assert client.get("/review").status_code == 403
        assert client.get("/review/api/conversations").json()["error"]["code"] == "forbidden"


def test_the_review_command_serves_the_store(review_gateway, tmp_path):
    _, db = review_gateway
    port = free_port()
    env = {**os.environ, "DELTAGUARD_API_KEYS": "tenant-b:key-b"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "deltaguard",
            "review",
            str(db),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}/review/api/conversations"
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(url, headers=B)
                break
            except httpx.ConnectError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
                time.sleep(0.1)
        assert [c["tenant"] for c in r.json()["conversations"]] == ["tenant-b"]
        assert httpx.get(url, headers=A).status_code == 401  # key-a is not a key of this server
        assert httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=True).url.path == "/review"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
    out = tmp_path / "export.jsonl"
    assert main(["review", str(db), "--export", str(out)]) == 0
    assert all("labels" in json.loads(x) for x in out.read_text().splitlines())
    assert main(["review", str(tmp_path / "missing.db")]) == 2


def test_located_findings_pass_through_onto_the_recorded_text(findings_review):
    base, _db = findings_review
    api = base + "/review/api"
    for row in httpx.get(api + "/conversations").json()["conversations"]:
        d = httpx.get(api + f"/conversations/{row['id']}").json()
        located = [(t, f) for t in d["turns"] for f in t["findings"] if "start" in f]
        # the injected line, found as an injection (in a tool output, never a jailbreak)
        assert max(f["score"] for _, f in located if f["category"] == "prompt_injection") >= 0.9
        for turn, f in located:
            assert (f["item"], f["in"]) == (1, "text") and f["score"] >= 0.5  # over its threshold
            assert turn["items"][f["item"]]["text"][f["start"] : f["end"]] == INJECTED_LINE
            assert ("preview" in f) is not d["redacted"]  # dropped at recording when redacting

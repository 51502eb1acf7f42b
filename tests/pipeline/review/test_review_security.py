"""The review page as only its owner can drive it: Host and Origin allow-lists, CSRF
refusals on changes, and the page's Content-Security-Policy (kept by the page in a real
browser)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.pipeline.review.test_review_page import browser_ready  # noqa: F401 (a fixture)
from tests.support.browser import run_node_script

CSP_SCRIPT = Path(__file__).with_name("review_csp.cjs")
A = {"Authorization": "Bearer key-a"}


def _label_url(base: str) -> str:
    rows = httpx.get(base + "/review/api/conversations?decision=block", headers=A).json()["conversations"]
    return f"{base}/review/api/conversations/{rows[0]['id']}/labels/jailbreak"


def test_the_page_sends_csp_frame_and_sniff_headers(review_gateway):
    base, _ = review_gateway
    for path in ("/review", "/review/static/review.js", "/review/static/review.css"):
        headers = httpx.get(base + path).headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert "frame-ancestors 'none'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"


def test_a_rebound_host_or_a_foreign_origin_is_refused(review_gateway):
    base, _ = review_gateway
    rebound = httpx.get(base + "/review/api/conversations", headers={**A, "Host": "attacker.example"})
    assert rebound.status_code == 403 and rebound.json()["error"]["code"] == "host_not_allowed"
    assert httpx.get(base + "/review", headers={"Host": "attacker.example:80"}).status_code == 403
    foreign = httpx.put(
        _label_url(base), json={"verdict": "confirmed"}, headers={**A, "Origin": "http://attacker.example"}
    )
    assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "origin_not_allowed"
    own = httpx.put(_label_url(base), json={"verdict": None}, headers={**A, "Origin": base})
    assert own.status_code == 200


def test_changes_need_json_and_a_same_site_request(review_gateway):
    base, _ = review_gateway
    url = _label_url(base)
    form = httpx.put(url, content=b'{"verdict": "confirmed"}', headers={**A, "Content-Type": "text/plain"})
    assert form.status_code == 403 and form.json()["error"]["code"] == "csrf_refused"
    cross = httpx.put(url, json={"verdict": "confirmed"}, headers={**A, "Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403 and cross.json()["error"]["code"] == "csrf_refused"
    same = httpx.put(url, json={"verdict": None}, headers={**A, "Sec-Fetch-Site": "same-origin"})
    assert same.status_code == 200


def test_the_page_works_under_its_csp(browser_ready, review_gateway):  # noqa: F811
    base, _ = review_gateway
    seen = run_node_script(CSP_SCRIPT, {"url": base, "key": "key-a"})
    assert seen["csp"] and "default-src 'self'" in seen["csp"]
    assert seen["violations"] == [] and seen["errors"] == [], seen
    colors = dict(seen["legend"])
    assert colors["— prompt_injection"] == "rgb(179, 38, 30)", colors  # set by the page's script

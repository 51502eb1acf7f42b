"""The review page in a real browser: headless Chromium (Debian's package) driven by
playwright-core against the gateway's review routes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from PIL import Image

from deltaguard.recording import TranscriptStore
from tests.pipeline.review.conftest import EMAIL, INJECTED_LINE
from tests.support.browser import BrowserUnavailable, chromium_binary, playwright_core, run_node_script

SCRIPT = Path(__file__).with_name("review_page.cjs")
# DELTAGUARD_DOCS_SCREENSHOTS=1 copies the page as tested into docs/ (the README shows it).
DOCS_IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"
GREEN = (0xDA, 0xFB, 0xE1)  # .flag-card.label-false_positive background
AMBER = (0xFF, 0xF8, 0xE1)  # an unreviewed flag card


@pytest.fixture(scope="module")
def browser_ready():
    try:
        chromium_binary()
        playwright_core()
    except BrowserUnavailable as exc:
        pytest.fail(f"the browser tests need Chromium and playwright-core: {exc}")


def card_color(png: Path, box: dict) -> tuple[int, int, int]:
    """The colour just inside the card's border (top-left, clear of its text)."""
    with Image.open(png) as img:
        return img.convert("RGB").getpixel((int(box["x"]) + 4, int(box["y"]) + 4))


def test_review_page_filters_opens_and_marks_a_false_positive(browser_ready, review_gateway, tmp_path):
    base, _db = review_gateway
    seen = run_node_script(SCRIPT, {"url": base, "key": "key-a", "out": str(tmp_path)})

    assert "API key" in seen["error_before_key"]
    assert seen["session"] == "tenant tenant-a" and seen["rows_all"] == 2  # tenant-b's is not listed
    assert seen["rows_block"] == ["prompt_injection, jailbreak"]  # the decision filter
    # The fetched page that carried the injection and the user's jailbreak are the highlighted
    # items, and they look it.
    page, said = seen["flagged_items"]
    assert page["flagged"] == "prompt_injection" and "Ignore all previous instructions" in page["text"]
    assert "jailbreak" in said["flagged"].split(",") and "Do Anything Now" in said["text"]
    assert page["background"] != seen["plain_item_background"] != said["background"]
    # The plot: one line per category with a point per turn, thresholds of the flagged ones.
    assert seen["turns"] == 2 and 600 <= seen["plot"]["width"] <= 642  # 640 at most, and its border
    assert {line["category"] for line in seen["plot"]["lines"]} >= {"prompt_injection", "jailbreak", "pii"}
    assert all(line["points"] == 2 for line in seen["plot"]["lines"])
    assert seen["plot"]["dots"] == 2 * len(seen["plot"]["lines"])
    assert sorted(seen["plot"]["thresholds"]) == ["jailbreak", "prompt_injection"]
    # Marked: the DOM says so, the list row too, and so does the store behind the API.
    assert (seen["state_before"], seen["state_after"]) == ("unreviewed", "false positive")
    assert seen["row_review_state"] == "partly"
    assert seen["foreign_requests"] == []  # everything came from the app
    rows = httpx.get(
        base + "/review/api/conversations?decision=block", headers={"Authorization": "Bearer key-a"}
    )
    assert rows.json()["conversations"][0]["labels"] == {"jailbreak": "false_positive"}

    # The screenshots: full viewport PNGs, the card amber before and green after.
    for name in ("before.png", "after.png"):
        with Image.open(tmp_path / name) as img:
            assert (img.format, img.size) == ("PNG", (1280, 900))
    assert [seen["box_before"][k] for k in "xy"] == [seen["box_after"][k] for k in "xy"]
    before = card_color(tmp_path / "before.png", seen["box_before"])
    after = card_color(tmp_path / "after.png", seen["box_after"])
    assert before == AMBER and after == GREEN, (before, after)
    assert json.dumps(seen)  # kept readable in the failure output


FINDINGS_SCRIPT = Path(__file__).with_name("review_findings.cjs")


def test_located_findings_are_highlighted_and_linked(browser_ready, findings_review, tmp_path):
    base, _db = findings_review
    seen = run_node_script(FINDINGS_SCRIPT, {"url": base, "out": str(tmp_path)})

    assert sorted(seen) == ["p1", "r1"]
    for conversation in ("p1", "r1"):
        page = seen[conversation]
        # The injected line, and only it, is marked, in the tool output: as text (its
        # "<!--" shown, not parsed), though emoji before it count twice in UTF-16. It reads
        # as an injection (in a tool output, never a jailbreak): one mark.
        (mark,) = page["marks"]
        assert mark["text"] == INJECTED_LINE, mark
        assert "prompt_injection" in mark["categories"].split(",") and "function_call_output" in mark["item"]
        # The gate's lexical view and the monitor's directives view both report the line.
        tips = [line.split(" ") for line in mark["title"].split("\n")]
        category, score, kind = tips[0]
        assert (category, kind) == ("prompt_injection", "(lexical)") and float(score) >= 0.9
        assert any(c == "prompt_injection" and k.startswith("(directives/") for c, _, k in tips)
        # the overlap's colour: more than one finding covers the line
        assert mark["background"] == "rgb(245, 168, 160)"
        # The turn's findings list links to the mark; following the link shows it.
        assert page["links"] == len(tips)  # one per finding
        assert any("prompt_injection/lexical" in e and "chars" in e for e in page["entries"])
        assert page["current"] == {"count": 1, "text": INJECTED_LINE, "visible": True}
        with Image.open(tmp_path / f"{conversation}.png") as img:
            assert img.size == (1280, 900)
    # Redacted: the email before the line is masked and the mark still covers the line.
    (tool_text,) = [t for t in seen["r1"]["items"] if "handler_0" in t]
    assert EMAIL not in tool_text and "[REDACTED:email]" in tool_text
    assert any("[REDACTED:email]" in e for e in seen["r1"]["entries"])
    assert any(EMAIL in t for t in seen["p1"]["items"])


LAYOUT_SCRIPT = Path(__file__).with_name("review_layout.cjs")


def test_layout_links_keys_and_the_list_at_load(browser_ready, findings_review, tmp_path):
    base, db = findings_review
    seen = run_node_script(LAYOUT_SCRIPT, {"url": base, "out": str(tmp_path)})

    # Served under `default-src 'self'`: no inline script, style or handler was refused.
    assert not [m for m in seen["console"] if "Content Security Policy" in m], seen["console"]
    # The list is on the page when it reports it loaded.
    assert seen["rows_at_load"] == 2 and seen["ready_at_load"] == "1"
    first, second = seen["ids"]
    # 1280 px: both panes side by side, every column of the list in view, nothing to scroll.
    wide = seen["wide"]
    assert seen["detail_at_load"] == str(second)
    assert [h["text"] for h in wide["headers"] if not h["inside"]] == []
    assert not wide["pane_scrolls"] and not wide["page_scrolls"]
    assert wide["list"]["width"] >= 480
    assert wide["detail"]["left"] > wide["list"]["left"] + wide["list"]["width"]
    assert wide["detail"]["width"] >= 660 and wide["plot"] >= 600
    # A URL per conversation, kept in the history.
    assert seen["hash_after_click"] == f"#conversation={first}" and seen["detail_after_back"] == str(second)
    # Keys: k and j move, f and c mark the current flag, typing in a field is not a key.
    assert seen["hash_after_k"] == f"#conversation={first}"
    assert [seen["current_flag"], "false_positive"] in seen["after_f"]
    assert any(verdict == "confirmed" for _, verdict in seen["after_c"])
    assert seen["detail_after_typing"] == str(second)
    with TranscriptStore(db).open(create=False) as store:
        marks = store.labels([second])[second]
    assert {c: m["verdict"] for c, m in marks.items()} == {c: v for c, v in seen["after_c"] if v}
    # 900 px: the list above the transcript, still every column, nothing sideways.
    narrow = seen["narrow"]
    assert narrow["detail"]["top"] >= narrow["list"]["bottom"]
    assert [h["text"] for h in narrow["headers"] if not h["inside"]] == [] and not narrow["page_scrolls"]
    for name in ("loaded.png", "conversation.png", "narrow.png"):
        with Image.open(tmp_path / name) as img:
            assert img.format == "PNG"
    if os.environ.get("DELTAGUARD_DOCS_SCREENSHOTS"):
        shutil.copyfile(tmp_path / "conversation.png", DOCS_IMAGES / "review.png")

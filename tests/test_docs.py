"""The README and docs/: the README's line budget, the CI command it carries, every relative
link resolving, and its guard API and Portkey examples working against a real gateway."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest

from deltaguard.gateway.config import GatewayConfig
from tests.pipeline.gateway.conftest import gateway_thread
from tests.pipeline.gateway.test_portkey import hook

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """The text outside fenced code blocks (code may hold bracketed text that is no link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(page.read_text()).splitlines() if line.startswith("#")}


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


def test_readme_fits_its_budget():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [gone](missing.md) [bad](#nowhere)\n```\n[x](code.md)\n```\n")
    assert [b.split(": ", 1)[1] for b in broken_links(page, tmp_path)] == [
        "missing.md (no such file)",
        "#nowhere (no such heading)",
    ]


def test_ci_runs_the_commands_the_readme_shows():
    text = README.read_text()
    run = subprocess.run(
        ["awk", "/^# test$/{getline; print; exit}", str(README)], capture_output=True, text=True, check=True
    )
    command = run.stdout.strip()
    assert command.startswith("python3 -m venv .venv && ") and ".venv/bin/pytest -q" in command
    assert "awk '/^# test$/{getline; print; exit}' README.md" in (REPO / ".ci" / "run").read_text()
    run_line = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/deltaguard demo"
    assert f"# run\n{run_line}\n" in text


def json_blocks(section: str) -> list[dict]:
    """The ```json blocks of the README section whose heading starts with `section`."""
    text = README.read_text()
    start = text.index(f"\n## {section}")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end > 0 else None]
    return [json.loads(b) for b in re.findall(r"```json\n(.*?)```", body, re.S)]


def test_guard_api_examples_work_as_the_readme_says(scorer):
    first, answer, follow_up = json_blocks("Attach it: the guard API")
    with gateway_thread(GatewayConfig(port=0), scorer) as (base, _):
        post = lambda path, body: httpx.post(f"{base}/v1/guard/{path}", json=body, timeout=30)  # noqa: E731
        checked = post("input", first)
        assert checked.status_code == 200 and checked.json()["decision"] == "allow", checked.text
        documented = {"decision", "categories", "category_scores", "continuation_id", "conversation_id"}
        assert documented | {"tokens_scored", "latency_ms"} <= set(checked.json())
        out = post("output", {**answer, "continuation_id": checked.json()["continuation_id"]})
        assert out.status_code == 200 and out.json()["decision"] == "allow", out.text
        nxt = post("input", {**follow_up, "continuation_id": out.json()["continuation_id"]})
        assert nxt.status_code == 200 and nxt.json()["decision"] == "allow", nxt.text
        # The same conversation, but the answer leaks a key (not in the README: agents read it).
        checked = post("input", first)
        leak = [{**answer["output"][0], "content": "It is AKIAIOSFODNN7EXAMPLE."}]
        out = post("output", {**answer, "output": leak, "continuation_id": checked.json()["continuation_id"]})
        assert out.status_code == 200, out.text
        assert out.json()["decision"] == "block" and out.json()["categories"] == ["secrets"]
        # What the README warns of: the leaked answer is history, so the next check is blocked.
        nxt = post("input", {**follow_up, "continuation_id": out.json()["continuation_id"]})
        assert nxt.status_code == 200 and nxt.json()["decision"] == "block", nxt.text
        assert "secrets" in nxt.json()["categories"]
        # A new conversation with the same question is not.
        fresh = post("input", {"messages": follow_up["messages"]})
        assert fresh.json()["decision"] == "allow"


def test_portkey_snippet_is_the_config_the_portkey_test_runs():
    (config,) = json_blocks("Attach it: Portkey")
    url = "http://127.0.0.1:8400/v1/guard/portkey"
    assert config["before_request_hooks"] == [hook("deltaguard-input", url)]
    assert config["after_request_hooks"] == [hook("deltaguard-output", url)]
    assert config["provider"] == "openai"

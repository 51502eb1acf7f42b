"""Benign agent conversations from real text (training/lib/agent_traffic.py)."""

import json
from collections import Counter

from deltaguard.transcripts import parse_conversation
from training.lib.agent_traffic import KINDS, build_conversations
from training.lib.real_text import Document

KIND_OF_DOC = (
    "code",
    "readme",
    "docs",
    "commit",
    "diff",
    "git_log",
    "manpage",
    "policy",
    "paragraph",
    "config",
)


def documents():
    out = []
    for i in range(60):
        kind = KIND_OF_DOC[i % len(KIND_OF_DOC)]
        text = f"Line one of {kind} {i}\n" + "Some real text that an agent reads. " * 20
        out.append(Document(text, f"repo:acme/tool{i % 3}", kind, f"path/{i}.txt"))
    return out


def agent_files():
    text = "---\nname: tests\n---\nRun the test suite before you commit, and keep changes small.\n" * 3
    return [Document(text, "repo:acme/skills", "agent_file", f"skills/s{i}/SKILL.md") for i in range(5)]


def test_every_kind_is_built_and_is_a_valid_transcript():
    chats = [["hi there", "hello!", "how are you?", "fine, thanks"]] * 3
    counts = dict.fromkeys(KINDS, 4)
    convs = list(build_conversations(documents(), chats, counts, agent_docs=agent_files()))
    assert Counter(c["labels"]["kind"] for c in convs) == counts
    for line, c in enumerate(convs, 1):
        conv = parse_conversation(json.loads(json.dumps(c)), "traffic.jsonl", line)
        assert conv.turns, c["id"]
    coding = next(c for c in convs if c["labels"]["kind"] == "coding")
    outputs = [i for t in coding["turns"] for i in t["input"] if i.get("type") == "function_call_output"]
    assert outputs and all("agent reads" in o["output"] for o in outputs)
    # every tool output answers a call the model made
    calls = [i for t in coding["turns"] for i in t.get("output", []) if i.get("type") == "function_call"]
    assert len(calls) == len(outputs)
    setup = next(c for c in convs if c["labels"]["kind"] == "agent_files")
    read = [
        i["output"] for t in setup["turns"] for i in t["input"] if i.get("type") == "function_call_output"
    ]
    assert read and all("Run the test suite" in o for o in read)


def test_agent_files_leave_the_other_kinds_as_they_were():
    counts = dict.fromkeys(KINDS, 3)
    without = list(build_conversations(documents(), [["a", "b"]], counts))
    with_them = list(build_conversations(documents(), [["a", "b"]], counts, agent_docs=agent_files()))
    assert [c for c in with_them if c["labels"]["kind"] != "agent_files"] == without


def test_the_same_seed_builds_the_same_conversations():
    counts = dict.fromkeys(KINDS, 3)
    a = list(build_conversations(documents(), [["a", "b"]], counts, seed=5))
    b = list(build_conversations(documents(), [["a", "b"]], counts, seed=5))
    assert a == b

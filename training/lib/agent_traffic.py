"""Benign agent conversations built from real text, shaped as the agents that read it.

Each conversation is a transcript (docs/contract.md section 1) of one agent kind:

    coding     a task taken from a real commit subject, then the agent reads files, issue
               templates, commit messages (how people report a bug), diffs, logs and CI
               files of that repository
    research   a question, then fetched documentation pages, manual pages, READMEs and
               paragraphs (any language)
    support    a customer's question, then policy documents (terms, privacy, conduct,
               licences, package notes) and the caller's account record
    inbox      "go through my mail": commit messages and release notes as e-mails, and
               a memory store of notes
    writing    a writing request with reference material pasted into the user message
    shell      a shell task, then real `git log`, `git show`, manual pages and configs
    chat       a held-back multi-turn human chat (chitchat's test conversations)
    agent_files
               a coding agent starting work reads the instructions written for agents
               (skills, rules, agent and prompt files: training/lib/agent_files.py)

Only the user's short task line is templated; everything the agent reads was written by
people for other purposes (training/lib/real_text.py). Conversations of one split read
only documents of that split's sources, so a model trained on the train split is
measured on repositories, packages and languages it never saw.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

from training.lib import agent_files
from training.lib.real_text import Document

KINDS = ("coding", "research", "support", "inbox", "writing", "shell", "chat", "agent_files")
# Conversations per kind in each split: >= 2,000 in all for the test split.
COUNTS = {
    "coding": 500,
    "research": 300,
    "support": 250,
    "inbox": 250,
    "writing": 250,
    "shell": 200,
    "chat": 300,
    "agent_files": 200,
}
TOOL_CHARS = 12_000  # an agent harness truncates a tool output about here
PASTE_CHARS = 6_000

CODING_KINDS = (
    "code",
    "readme",
    "docs",
    "config",
    "ci",
    "issue_template",
    "changelog",
    "commit",
    "diff",
    "dockerfile",
    "policy",
)
RESEARCH_KINDS = ("docs", "readme", "manpage", "debian_doc", "changelog", "paragraph")
SUPPORT_KINDS = ("policy", "license", "debian_doc", "docs")
SHELL_KINDS = ("git_log", "diff", "manpage", "config", "ci", "dockerfile")

CODING_TASKS = (
    "Look into this: {subject}",
    "Can you work on the following in this repo? {subject}",
    "{subject} - please investigate and propose a fix.",
    "We need this done: {subject}. Read the relevant files first.",
    "Review the recent change '{subject}' and check that the tests cover it.",
    "Find where this is handled in the code: {subject}",
)
AGENT_FILE_TASKS = (  # {path}: the first file read, so that each split's task lines are its own
    "Before you start, read {path} and follow it while you work here.",
    "Load the skill in {path} and tell me when it applies.",
    "Read {path} and tell me which conventions apply to a new module.",
    "Which tools does {path} let the agent use?",
    "Check {path} for anything outdated and list what should change.",
)
RESEARCH_TASKS = (
    "What does the documentation say about {topic}?",
    "Summarise how {topic} works, with sources.",
    "I need a short overview of {topic} for a colleague.",
    "Find the relevant docs on {topic} and explain the options.",
)
SUPPORT_QUESTIONS = (
    "Hi, I was charged twice this month, can you check my account?",
    "Can I get a refund for my last order? It arrived damaged.",
    "How do I delete my account and all my data?",
    "I can't log in since yesterday, please help.",
    "What is your policy on sharing my information with third parties?",
    "My subscription renewed but I cancelled it last week.",
    "Can I change the email address on my account?",
    "Is it allowed to use your service for a commercial project?",
)
INBOX_TASKS = (
    "Go through my unread mail and tell me what needs a reply.",
    "Summarise today's emails and draft short answers where needed.",
    "Check my inbox and my notes and list the open action items.",
)
WRITING_TASKS = (
    "Here is some reference material:\n\n{paste}\n\nWrite a short summary of it for our newsletter.",
    "{paste}\n\nRewrite the text above in plain language for non-experts.",
    "Please translate the main points of this into English bullet points:\n\n{paste}",
    "Using the following as background, draft a blog post introduction.\n\n---\n{paste}\n---",
    "Proofread this and suggest improvements:\n\n{paste}",
)
SHELL_TASKS = (
    "Show me what changed recently in this repository.",
    "Check the last commits and tell me which one touched the build.",
    "How do I use this command? Look at its manual.",
    "Inspect the CI configuration and the recent history.",
)
ANSWER = "I have read the material; here is what I found."


def _subject(doc: Document) -> str:
    return doc.text.strip().splitlines()[0][:160]


def _topic(doc: Document) -> str:
    for line in doc.text.splitlines():
        line = re.sub(r"^[#=*`\s-]+|[#=*`\s-]+$", "", line)
        if 3 <= len(line) <= 80:
            return line
    return doc.name.rsplit("/", 1)[-1]


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": f"call_{i}", "name": name, "arguments": json.dumps(args)}


def _output(i: int, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"call_{i}", "output": text[:TOOL_CHARS]}


def tool_loop(task: str, reads: Sequence[tuple[str, dict[str, Any], str]]) -> list[dict[str, Any]]:
    """The turns an agent loop sends: the task, then each tool output as the next delta."""
    turns: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = [{"role": "user", "content": task}]
    for i, (tool, args, text) in enumerate(reads):
        turns.append({"input": pending, "output": [_call(i, tool, args)]})
        pending = [_output(i, text)]
    turns.append({"input": pending, "output": [{"role": "assistant", "content": ANSWER}]})
    return turns


def account_record(rng: random.Random) -> str:
    """A support agent's lookup result (structured, no free text but a note)."""
    plans = ("free", "pro", "team", "enterprise")
    record = {
        "customer_id": f"C{rng.randrange(10**7):07d}",
        "plan": rng.choice(plans),
        "status": rng.choice(("active", "past_due", "cancelled")),
        "created": f"20{rng.randrange(15, 26)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
        "invoices": [
            {
                "id": f"INV-{rng.randrange(10**5)}",
                "amount": round(rng.uniform(5, 500), 2),
                "paid": rng.random() < 0.8,
            }
            for _ in range(rng.randrange(1, 5))
        ],
        "open_tickets": rng.randrange(0, 3),
    }
    return json.dumps(record, indent=2)


def as_email(doc: Document, rng: random.Random) -> str:
    lines = doc.text.strip().splitlines()
    sender = rng.choice(("maintainers", "release-bot", "a colleague", "the build team", "support"))
    return f"From: {sender}\nSubject: {lines[0][:120]}\n\n" + "\n".join(lines[1:] or lines)


def memory_store(docs: Sequence[Document]) -> str:
    return json.dumps({"memories": [{"id": i, "note": _subject(d)} for i, d in enumerate(docs)]}, indent=1)


class _Pools:
    """The split's documents by kind and by source."""

    def __init__(self, docs: Sequence[Document]) -> None:
        self.by_kind: dict[str, list[Document]] = defaultdict(list)
        self.by_source_kind: dict[tuple[str, str], list[Document]] = defaultdict(list)
        for d in docs:
            self.by_kind[d.kind].append(d)
            self.by_source_kind[(d.source, d.kind)].append(d)
        self.repos = sorted({d.source for d in docs if d.source.startswith("repo:")})

    def pick(
        self, rng: random.Random, kinds: Sequence[str], n: int, source: str | None = None
    ) -> list[Document]:
        pool = [
            d
            for k in kinds
            for d in (self.by_source_kind.get((source, k), []) if source else self.by_kind.get(k, []))
        ]
        return rng.sample(pool, min(n, len(pool))) if pool else []


def build_conversations(
    docs: Sequence[Document],
    chats: Sequence[Sequence[str]],
    counts: dict[str, int] = COUNTS,
    seed: int = 0,
    agent_docs: Sequence[Document] = (),
) -> Iterator[dict[str, Any]]:
    """Transcript dicts (`id`, `turns`, `labels` with the kind) for one split's documents,
    held-back chats (each a list of messages, alternating speakers) and agent files (a pool
    of their own: the other kinds' conversations do not depend on them)."""
    general, instructions = _Pools(docs), _Pools(agent_docs)
    for kind in KINDS:
        pools = instructions if kind == "agent_files" else general
        rng = random.Random(f"{seed}\0{kind}")
        # Chats are drawn without replacement: a chat drawn twice would count its alarms twice.
        order = rng.sample(list(chats), len(chats)) if kind == "chat" else []
        made = 0
        attempts = 0
        while made < counts.get(kind, 0) and attempts < counts.get(kind, 0) * 5:
            attempts += 1
            chat = order[(attempts - 1) % len(order)] if order else None
            turns = _build(kind, pools, chat, rng)
            if turns:
                yield {"id": f"{kind}-{made}", "turns": turns, "labels": {"kind": kind, "categories": []}}
                made += 1


def _build(kind: str, pools: _Pools, chat: Sequence[str] | None, rng: random.Random) -> list[dict] | None:
    if kind == "coding":
        if not pools.repos:
            return None
        repo = rng.choice(pools.repos)
        subjects = pools.pick(rng, ("commit",), 1, repo)
        reads = pools.pick(rng, CODING_KINDS, rng.randrange(3, 11), repo)
        if not subjects or not reads:
            return None
        task = rng.choice(CODING_TASKS).format(subject=_subject(subjects[0]))
        tools = {"commit": "git_show", "diff": "git_show", "issue_template": "read_file"}
        return tool_loop(task, [(tools.get(d.kind, "read_file"), {"path": d.name}, d.text) for d in reads])
    if kind == "agent_files":
        if not pools.repos:
            return None
        # a collection in proportion to its files: a small one's files are not reread a dozen times
        sizes = [len(pools.by_source_kind[(r, agent_files.KIND)]) for r in pools.repos]
        repo = rng.choices(pools.repos, weights=sizes)[0]
        reads = pools.pick(rng, (agent_files.KIND,), rng.randrange(1, 5), repo)
        if not reads:
            return None
        task = rng.choice(AGENT_FILE_TASKS).format(path=reads[0].name)
        return tool_loop(task, [("read_file", {"path": d.name}, d.text) for d in reads])
    if kind == "research":
        reads = pools.pick(rng, RESEARCH_KINDS, rng.randrange(2, 7))
        if not reads:
            return None
        task = rng.choice(RESEARCH_TASKS).format(topic=_topic(reads[0]))
        return tool_loop(task, [("fetch_page", {"url": d.name}, d.text) for d in reads])
    if kind == "support":
        reads = pools.pick(rng, SUPPORT_KINDS, rng.randrange(1, 4))
        if not reads:
            return None
        steps = [("lookup_account", {}, account_record(rng))]
        steps += [("search_policies", {"query": _topic(d)}, d.text) for d in reads]
        return tool_loop(rng.choice(SUPPORT_QUESTIONS), steps)
    if kind == "inbox":
        mails = pools.pick(rng, ("commit", "changelog"), rng.randrange(2, 8))
        notes = pools.pick(rng, ("commit",), rng.randrange(3, 12))
        if not mails:
            return None
        steps = [("read_email", {"id": i}, as_email(d, rng)) for i, d in enumerate(mails)]
        steps.append(("read_memory", {}, memory_store(notes)))
        return tool_loop(rng.choice(INBOX_TASKS), steps)
    if kind == "writing":
        ref = pools.pick(rng, ("paragraph", "docs", "readme", "changelog", "debian_doc"), 1)
        if not ref:
            return None
        paste = ref[0].text[:PASTE_CHARS]
        task = rng.choice(WRITING_TASKS).format(paste=paste)
        return [
            {
                "input": [{"role": "user", "content": task}],
                "output": [{"role": "assistant", "content": ANSWER}],
            }
        ]
    if kind == "shell":
        reads = pools.pick(rng, SHELL_KINDS, rng.randrange(2, 7))
        if not reads:
            return None
        return tool_loop(rng.choice(SHELL_TASKS), [("shell", {"cmd": d.name}, d.text) for d in reads])
    if kind == "chat":
        if not chat:
            return None
        messages = list(chat)
        turns = []
        for i in range(0, len(messages) - 1, 2):
            turns.append(
                {
                    "input": [{"role": "user", "content": messages[i]}],
                    "output": [{"role": "assistant", "content": messages[i + 1]}],
                }
            )
        return turns or None
    raise ValueError(f"unknown agent kind {kind!r}")


def held_back_chats(split: str, cache: Any = None) -> list[list[str]]:
    """chitchat conversations of `split` (train_lexical's split of the allowed ones), each a
    list of messages; the reserved tenth is never read."""
    from training.corpus.chitchat import PATH
    from training.corpus.wheels import open_wheel
    from training.lib.detection_data import legacy_splits

    _, by_group = legacy_splits(cache)
    data = json.loads(open_wheel("chitchat-dataset", cache).read(PATH))
    out = []
    for key, conv in data.items():
        if by_group.get(f"chitchat:{key}") != split:
            continue
        msgs = ["\n".join(u["text"] for u in turn).strip() for turn in conv["messages"]]
        msgs = [m for m in msgs if m]
        if len(msgs) >= 2:
            out.append(msgs[:40])
    return out


def conversation_texts(split: str, seed: int = 1) -> list[tuple[str, list[str], list[str], list[str]]]:
    """The split's conversations as (kind, user messages, tool outputs, assistant messages):
    what a recipe scores to choose an operating point per conversation."""
    from training.lib.real_text import all_documents

    docs = [d for d in all_documents() if d.split == split]
    agent_docs = [d for d in agent_files.agent_documents() if d.split == split]
    out = []
    for c in build_conversations(docs, held_back_chats(split), COUNTS, seed=seed, agent_docs=agent_docs):
        user, tool, assistant = [], [], []
        for turn in c["turns"]:
            for item in [*turn["input"], *turn.get("output", [])]:
                if item.get("type") == "function_call_output":
                    tool.append(item["output"])
                elif item.get("role") == "user":
                    user.append(item["content"])
                elif item.get("role") == "assistant":
                    assistant.append(item["content"])
        out.append((c["labels"]["kind"], user, tool, assistant))
    return out

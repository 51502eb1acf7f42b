"""Replaying recorded transcripts with another policy or model, and the verdict diff."""

from __future__ import annotations

import json
import shutil

import pytest

from deltaguard.artifacts import MANIFEST_NAME
from deltaguard.classifiers.registry import model_thresholds
from deltaguard.classifiers.scaled import scale
from deltaguard.cli import main
from deltaguard.events import FlagEvent
from deltaguard.models import MODELS_DIR
from deltaguard.recording import TranscriptRecorder, read_recorded
from deltaguard.state.loading import build_scorer
from deltaguard.state.policy import Policy
from deltaguard.state.tracker import ConversationTracker
from deltaguard.tools.replay_diff import diff_report, diff_turns, replay_store
from deltaguard.transcripts import parse_conversation

AWS_KEY = "AKIAZ7QWERTYUIOPLKJH"

CONVERSATIONS = [
    {
        "id": "email",
        "turns": [
            {"input": [{"role": "user", "content": "hello, can you help with my account?"}]},
            {"input": [{"role": "user", "content": "sure, write to jane.doe@corp-mail.com"}]},
            {"input": [{"role": "user", "content": "thanks, bye"}]},
        ],
    },
    {
        "id": "card",
        "turns": [
            {
                "input": [{"role": "user", "content": "I want to change my card."}],
                "output": [{"role": "assistant", "content": "Sure, what is the new one?"}],
            },
            {"input": [{"role": "user", "content": "It's 4111 1111 1111 1111."}]},
        ],
    },
    {
        "id": "secret",
        "turns": [
            {
                "input": [{"role": "user", "content": "why does deploy fail?"}],
                "output": [{"type": "function_call", "call_id": "c1", "name": "cat", "arguments": "{}"}],
            },
            {
                "input": [{"type": "function_call_output", "call_id": "c1", "output": f"KEY={AWS_KEY[:9]}"}],
                "output": [{"type": "function_call", "call_id": "c2", "name": "cat", "arguments": "{}"}],
            },
            {"input": [{"type": "function_call_output", "call_id": "c2", "output": f"{AWS_KEY[9:]}\n"}]},
        ],
    },
    {"id": "benign", "turns": [{"input": [{"role": "user", "content": "what is the capital of France?"}]}]},
]


def record_conversations(recorder, scorer, convs):
    """What the safety stage does, synchronously: gate every turn, record its flags."""
    tracker = ConversationTracker(scorer)
    for n, obj in enumerate(convs):
        conv = parse_conversation(obj, "<test>", n)
        previous = None
        for t, turn in enumerate(conv.turns):
            rid = f"{conv.id}#{t}"
            tracked = tracker.score_turn(rid, turn.input, previous, conversation_id=conv.id)
            verdict = scorer.verdict(tracked.fold)
            if verdict.flagged_categories:
                event = FlagEvent.build(
                    conversation_id=conv.id,
                    response_id=rid,
                    lane="gate",
                    decision="block" if verdict.decision == "block" else "flag",
                    categories=verdict.flagged_categories,
                    scores=verdict.category_scores,
                    classifier_versions=scorer.versions,
                )
                recorder.record(event, tracked.record)
            if turn.output:
                tracker.score_output(rid, turn.output)
            previous = rid
    recorder.close()


@pytest.fixture(scope="module")
def scorer():
    """The per-message lexical view judges user messages here: the oracles below rescale
    its scores by the manifest's thresholds (the conversation view has its own)."""
    return build_scorer(("secrets", "pii", "lexical"))


@pytest.fixture
def store(tmp_path, scorer):
    db = tmp_path / "flags.db"
    record_conversations(TranscriptRecorder(db, scorer, redact=False), scorer, CONVERSATIONS)
    return db


def unscale(value: float, t: float) -> float:
    return 2 * value * t if value < 0.5 else t + (value - 0.5) * 2 * (1 - t)


def expected_changes(store, policy: Policy, drop: tuple[str, ...] = (), rescale=None):
    """The oracle: recorded scores under another policy (and classifiers dropped, or a
    model's threshold moved from old to new: `rescale={category: (old, new)}`)."""
    rescale = rescale or {}
    rows = set()
    for rec in read_recorded(store):
        for v in rec.verdicts:
            scores = {c: (0.0 if c in drop else s) for c, s in v["category_scores"].items()}
            for c, (old, new) in rescale.items():
                scores[c] = scale(unscale(scores[c], old), new)
            decision, flagged = policy.decide(scores)
            for c, s in scores.items():
                if abs(s - v["category_scores"][c]) > 1e-6 or (c in flagged) != (
                    c in v["flagged_categories"]
                ):
                    rows.add((rec.conversation_id, v["index"], c, v["decision"], decision))
    return rows


def actual_changes(diff):
    return {
        (r["conversation"], r["turn"], r["category"], r["old_decision"], r["new_decision"])
        for r in diff["rows"]
    }


def test_flagged_conversations_only_are_recorded(store):
    assert [r.conversation_id for r in read_recorded(store)] == ["email", "card", "secret"]


@pytest.mark.parametrize("mode", ["delta", "full"])
def test_same_policy_and_models_reproduce_every_recorded_verdict(store, scorer, mode):
    result, recorded = replay_store(store, scorer, mode)
    diff = diff_report(recorded, result, scorer, str(store))
    assert diff["rows"] == [] and diff["turns_changed"] == 0
    # A recording ends at its first flagged turn (later flags with the same categories
    # are added to it): email and card at turn 1, secret at turn 2.
    assert diff["turns_compared"] == 2 + 2 + 3


def test_a_threshold_swap_shows_exactly_the_verdicts_it_flips(store, tmp_path, scorer, capsys):
    out = tmp_path / "replay.json"
    code = main(
        [
            *("replay", "--from-store", str(store), "--classifiers", "secrets,pii,lexical"),
            *("--threshold", "pii=0.9", "--diff", "--json", str(out)),
        ]
    )
    assert code == 0
    data = json.loads(out.read_text())
    # docs/contract.md section 2's keys are unchanged; the diff is one more optional key.
    assert set(data) == {"mode", "conversations", "diff"} and data["mode"] == "delta"
    for conv in data["conversations"]:
        assert set(conv) == {"id", "turns"}
        for turn in conv["turns"]:
            assert {"index", "decision", "category_scores", "flagged_categories", "latency_ms"} <= set(turn)
            assert "tokens_scored" in turn
    diff = data["diff"]
    want = expected_changes(store, scorer.policy.with_thresholds({"pii": 0.9}))
    # The email (pii 0.8) is no longer flagged; the card (1.0) still is.
    assert want == {("email", 1, "pii", "flag", "allow")}
    assert actual_changes(diff) == want
    for row in diff["rows"]:
        assert row["old_score"] == row["new_score"] == pytest.approx(0.8)
        assert row["old_flagged"] and not row["new_flagged"]
        assert row["old_ms"] is not None and row["new_ms"] is not None
    assert diff["decisions_changed"] == 1 and diff["turns_changed"] == 1
    printed = capsys.readouterr().out
    assert "1 turns changed" in printed
    # One conversation only.
    assert main(["replay", "--from-store", str(store), "--conversation", "card", "--json", str(out)]) == 0
    assert [c["id"] for c in json.loads(out.read_text())["conversations"]] == ["card"]


def models_copy(tmp_path, edit):
    """A models directory with the lexical artifact and an edited manifest."""
    dest = tmp_path / "models-v2"
    dest.mkdir()
    manifest = json.loads((MODELS_DIR / MANIFEST_NAME).read_text())
    lexical = manifest["models"]["lexical"]
    shutil.copyfile(MODELS_DIR / lexical["file"], dest / lexical["file"])
    manifest["models"] = {"lexical": lexical}
    edit(lexical)
    (dest / MANIFEST_NAME).write_text(json.dumps(manifest))
    return dest


def test_another_model_version_from_another_models_directory(store, tmp_path, scorer):
    def lower_thresholds(entry):
        entry["version"] = "2-test"
        entry["thresholds"] = {"prompt_injection": 0.001, "jailbreak": 0.001}

    models = models_copy(tmp_path, lower_thresholds)
    new = build_scorer(("secrets", "pii", "lexical"), models_dir=models)
    assert new.versions["lexical"] == "2-test+reading4"  # the entry serves it in reading 4
    result, recorded = replay_store(store, new)
    diff = diff_report(recorded, result, new, str(store))
    old_t = model_thresholds("lexical")
    want = expected_changes(store, new.policy, rescale={c: (t, 0.001) for c, t in old_t.items()})
    assert want  # the user messages score above 0.001
    assert actual_changes(diff) == want
    assert {c["classifier_versions"]["recorded"]["lexical"] for c in diff["conversations"]} == {
        scorer.versions["lexical"]
    }
    assert diff["classifier_versions"]["lexical"] == "2-test+reading4"


def test_another_classifier_set(store, tmp_path, scorer):
    out = tmp_path / "replay.json"
    code = main(
        [
            "replay",
            "--from-store",
            str(store),
            "--classifiers",
            "secrets,lexical",
            "--diff",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    diff = json.loads(out.read_text())["diff"]
    want = expected_changes(store, scorer.policy, drop=("pii",))
    assert {r[0] for r in want} == {"email", "card"} and {r[2] for r in want} == {"pii"}
    assert actual_changes(diff) == want
    assert all(r["new_score"] == 0.0 and r["old_score"] > 0.0 for r in diff["rows"])


def test_redacted_recordings_mark_what_redaction_hides(tmp_path, scorer):
    db = tmp_path / "redacted.db"
    record_conversations(TranscriptRecorder(db, scorer, redact=True), scorer, CONVERSATIONS)
    result, recorded = replay_store(db, scorer)
    diff = diff_report(recorded, result, scorer, str(db))
    assert diff["rows"] and all(r["redacted"] for r in diff["rows"])
    assert {"pii", "secrets"} <= {r["category"] for r in diff["rows"]}
    by_id = {c["id"]: c for c in diff["conversations"]}
    assert by_id["email"]["redacted_turns"] == [1] and by_id["secret"]["redacted_turns"] == [1, 2]


def test_diff_turns_reports_decision_only_changes_and_missing_turns():
    old = [
        {
            "decision": "flag",
            "category_scores": {"pii": 0.8},
            "flagged_categories": ["pii"],
            "latency_ms": {},
        },
        {
            "decision": "flag",
            "category_scores": {"pii": 0.8},
            "flagged_categories": ["pii"],
            "latency_ms": {},
        },
    ]
    new = [{**old[0], "decision": "block"}]
    rows = diff_turns("c", old, new)
    assert [(r.turn, r.category, r.old_decision, r.new_decision) for r in rows] == [
        (0, "-", "flag", "block"),
        (1, "pii", "flag", None),
    ]


def test_replay_arguments_are_checked(tmp_path, capsys):
    assert main(["replay", "--from-store", str(tmp_path / "missing.db")]) == 2
    assert main(["replay", "--diff", str(tmp_path / "x.jsonl")]) == 2
    assert "no such recording store" in capsys.readouterr().err

"""`deltaguard calibrate` measures what was scored: a redacted recording still counts the
secret it leaked, and the report says when a recording had to be replayed instead."""

from __future__ import annotations

import asyncio
import json

import pytest

from deltaguard.classifiers.pii import PiiClassifier
from deltaguard.classifiers.secrets import SecretsClassifier
from deltaguard.cli import main
from deltaguard.lanes.stage import SafetyStage
from deltaguard.parsing import parse_item
from deltaguard.recording import TranscriptStore, read_recorded
from deltaguard.recording.recorder import TranscriptRecorder
from deltaguard.state.scoring import Scorer
from deltaguard.tools.calibrate import calibrate

KEYS = [f"AKIAZ7QWERTYUIOPL{c}{c}{c}" for c in "KMN"]  # shape-valid, not real keys
EMAILS = [f"jane.doe{i}@corp-mail.com" for i in range(3)]


def user(text: str):
    return parse_item({"role": "user", "content": text})


@pytest.fixture(scope="module")
def reviewed_store(tmp_path_factory, scorer):
    """A redacted store recorded by the real stage: three conversations that leaked a key
    (confirmed) and three that named an e-mail address (marked false positive)."""
    db = tmp_path_factory.mktemp("calibrate") / "flagged.db"

    async def record() -> None:
        stage = SafetyStage(scorer, recorder=TranscriptRecorder(db, scorer, redact=True))
        await stage.start()
        for i, key in enumerate(KEYS):
            await stage.check_turn(f"k{i}-0", [user("Deploy the staging stack, please.")])
            await stage.check_turn(f"k{i}-1", [user(f"Use the key {key} for it.")], f"k{i}-0")
        for i, email in enumerate(EMAILS):
            await stage.check_turn(f"e{i}-0", [user(f"Write to {email} about the invoice.")])
        assert (await stage.aclose()).get("recordings") == 0

    asyncio.run(record())
    recordings = read_recorded(db)
    assert len(recordings) == 6 and all(r.redacted for r in recordings)
    with TranscriptStore(db).open(create=False) as store:
        for rec in recordings:
            for cat in rec.categories:
                verdict = "confirmed" if cat == "secrets" else "false_positive"
                store.set_label(rec.id, cat, verdict, reviewer=None)
    return db


def test_a_redacted_leak_counts_with_the_score_it_was_recorded_with(reviewed_store, scorer, tmp_path):
    raw = b"".join(p.read_bytes() for p in reviewed_store.parent.glob("flagged.db*"))
    assert not any(key.encode() in raw for key in KEYS)  # the store holds no key
    result = calibrate(reviewed_store, scorer, target_fpr=0.5)
    secrets = result.reports["secrets"].to_json()
    assert (secrets["positives"], secrets["negatives"], secrets["recall"]) == (3, 3, 1.0)
    assert secrets["roc_auc"] == 1.0 and secrets["false_positive_rate"] == 0.0
    assert result.reports["secrets"].turns_to_catch == [0, 0, 0]  # at the turn the key arrived
    assert result.scores_from == {"recorded": 6, "replayed": 0} and result.notes == []
    # Each item's own scores are kept too, taken before redaction.
    (rec,) = [r for r in read_recorded(reviewed_store) if r.conversation_id == "k0-0"]
    assert rec.verdicts[1]["item_scores"][0]["secrets"] == 1.0
    assert "[REDACTED:aws_access_key_id]" in json.dumps(rec.transcript)

    out = tmp_path / "cal"
    assert main(["calibrate", str(reviewed_store), "--target-fpr", "0.5", "--out", str(out)]) == 0
    assert json.loads((out / "eval.json").read_text())["scores_from"] == {"recorded": 6, "replayed": 0}


def test_other_classifiers_replay_and_the_report_says_what_redaction_hides(reviewed_store, tmp_path, capsys):
    rules = Scorer([SecretsClassifier(), PiiClassifier()])  # not the versions that recorded the store
    result = calibrate(reviewed_store, rules, target_fpr=0.5)
    assert result.scores_from == {"recorded": 0, "replayed": 6}
    assert result.reports["secrets"].to_json()["recall"] == 0.0  # the masked keys are not found again
    assert "replayed" in result.notes[0] and "redacted" in result.notes[1] and "secrets" in result.notes[1]

    out = tmp_path / "cal"
    code = main(["calibrate", str(reviewed_store), "--classifiers", "secrets,pii", "--out", str(out)])
    assert code == 0
    assert "note: 6 of them are redacted" in capsys.readouterr().err
    report = json.loads((out / "eval.json").read_text())
    assert report["scores_from"]["replayed"] == 6 and len(report["notes"]) == 2
    assert "Note: 6 of them are redacted" in (out / "eval.md").read_text()

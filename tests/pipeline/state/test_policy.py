"""Decision policy: decisions from conversation-level scores, and policy files."""

from __future__ import annotations

import json

import pytest

from deltaguard.cli import main
from deltaguard.errors import PolicyError
from deltaguard.gateway.config import GatewayConfig
from deltaguard.gateway.server import scorer_for
from deltaguard.state.policy import ACTION_THRESHOLD, Policy, load_policy


def test_a_block_category_blocks_and_a_flag_category_flags():
    policy = Policy()
    assert policy.decide({"pii": 0.7, "secrets": 0.1}) == ("flag", ["pii"])
    assert policy.decide({"pii": 0.7, "secrets": 0.5}) == ("block", ["pii", "secrets"])
    assert policy.decide({"pii": 0.49}) == ("allow", [])


def write(tmp_path, obj, name="policy.json"):
    path = tmp_path / name
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def test_a_policy_file_overrides_fields_and_keeps_the_rest(tmp_path):
    path = write(tmp_path, {"categories": {"pii": {"action": "block"}, "jailbreak": {"threshold": 0.8}}})
    policy = load_policy(path)
    assert policy.categories["pii"].action == "block" and policy.categories["pii"].threshold == 0.5
    assert (
        policy.categories["jailbreak"].threshold == 0.8 and policy.categories["jailbreak"].action == "block"
    )
    assert policy.categories["secrets"] == Policy().categories["secrets"]
    assert policy.decide({"pii": 0.6}) == ("block", ["pii"])


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "Expecting property name"),
        ([], "expected"),
        ({"categories": [], "x": 1}, "expected"),
        ({"categories": {}, "rules": {}}, "unknown field(s) ['rules']"),
        ({"categories": {"pii": "block"}}, "categories.pii: expected an object"),
        (
            {"categories": {"pii": {"action": "deny"}}},
            "categories.pii.action: Input should be",
        ),
        ({"categories": {"pii": {"threshold": 2}}}, "categories.pii.threshold: Input should be less than"),
        ({"categories": {"pii": {"colour": "red"}}}, "categories.pii.colour: Extra inputs are not permitted"),
        (
            {"categories": {"prompt_injecton": {"action": "block"}}},
            "categories.prompt_injecton: unknown category (did you mean 'prompt_injection'?)",
        ),
        ({"categories": {"spam": {"action": "flag"}}}, "categories.spam: unknown category; known: "),
    ],
)
def test_a_bad_policy_file_names_the_file_and_the_field(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(PolicyError, match=str(path)) as info:
        load_policy(path)
    assert message in str(info.value)


def test_replay_and_serve_take_a_policy_file(tmp_path, capsys):
    path = write(tmp_path, {"categories": {"pii": {"action": "block"}}})
    transcript = write(
        tmp_path,
        json.dumps(
            {"id": "c", "turns": [{"input": [{"role": "user", "content": "mail jane.doe@corp-mail.com"}]}]}
        )
        + "\n",
        "t.jsonl",
    )
    out = tmp_path / "out.json"
    assert main(["replay", str(transcript), "--policy", str(path), "--json", str(out), "--no-progress"]) == 0
    (turn,) = json.loads(out.read_text())["conversations"][0]["turns"]
    assert turn["decision"] == "block" and turn["flagged_categories"] == ["pii"]
    assert main(["replay", str(transcript), "--policy", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    scorer = scorer_for(GatewayConfig(policy_path=str(path)))
    assert scorer.policy.categories["pii"].action == "block"


def test_monitor_evidence_from_a_user_message_blocks_only_over_its_block_threshold():
    policy = Policy()
    at = policy.categories["prompt_injection"].user_block_threshold
    assert at is not None and at > policy.threshold("prompt_injection")
    flagged = ["prompt_injection", "toxicity"]  # toxicity's action is flag: never enforced here
    alert = [{"prompt_injection": 0.7, "toxicity": 0.9}]
    assert policy.monitor_blocking(flagged, alert, ["user"]) == []
    assert policy.monitor_blocking(flagged, [{"prompt_injection": at}], ["user"]) == ["prompt_injection"]
    assert policy.monitor_blocking(
        flagged, [{"prompt_injection": 0.0}, {"prompt_injection": 0.6}], ["user", "tool"]
    ) == ["prompt_injection"]
    # flagged by an earlier turn only: this turn's items carry no evidence of it
    assert policy.monitor_blocking(flagged, [{"prompt_injection": 0.1}], ["tool"]) == []


def test_a_policy_file_sets_or_clears_the_user_block_threshold(tmp_path):
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"categories": {"jailbreak": {"user_block_threshold": None}}}))
    policy = load_policy(path)
    assert policy.categories["jailbreak"].user_block_threshold is None
    assert policy.monitor_blocking(["jailbreak"], [{"jailbreak": 0.5}], ["user"]) == ["jailbreak"]
    path.write_text(json.dumps({"categories": {"jailbreak": {"user_block_threshold": 1.5}}}))
    with pytest.raises(PolicyError, match=r"categories\.jailbreak\.user_block_threshold"):
        load_policy(path)


def test_the_action_check_settings_default_and_load(tmp_path):
    assert Policy().actions.action == "block" and Policy().actions.threshold == ACTION_THRESHOLD
    path = write(tmp_path, {"actions": {"action": "flag", "threshold": 0.6}})
    policy = load_policy(path)
    assert policy.actions.action == "flag" and policy.actions.threshold == 0.6
    assert policy.categories == Policy().categories  # the categories keep their defaults


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"actions": "block"}, "actions: expected an object"),
        ({"actions": {"action": "deny"}}, "actions.action: Input should be"),
        ({"actions": {"threshold": 0}}, "actions.threshold: Input should be greater than 0"),
        ({"actions": {"threshold": 1.5}}, "actions.threshold: Input should be less than or equal to 1"),
        ({"actions": {"colour": "red"}}, "actions.colour: Extra inputs are not permitted"),
        ({"actions": {"category": "prompt_injecton"}}, "unknown category 'prompt_injecton' (did you mean"),
        ({"action": {"action": "flag"}}, "unknown field(s) ['action']"),
    ],
)
def test_bad_action_check_settings_name_the_field(tmp_path, content, message):
    path = write(tmp_path, content)
    with pytest.raises(PolicyError, match=str(path)) as info:
        load_policy(path)
    assert message in str(info.value)

"""The per-message side of the real-traffic report (eval/agent_traffic.py)."""

import pytest

from eval import agent_traffic


def test_chat_messages_are_scored_one_by_one_through_the_pipeline(monkeypatch):
    chats = [
        ["hey! how was the trip?", "great, we rented bikes", "", "nice"],
        ["what are you up to?", "go kill yourself, nobody wants you here"],
    ]
    monkeypatch.setattr(agent_traffic, "held_back_chats", lambda split: chats)
    counted = agent_traffic.chat_messages_flagged("test", None, None)
    assert (counted["k"], counted["n"]) == (1, 5)  # the empty message is not a message
    lo, hi = counted["ci"]
    assert lo < counted["rate"] == 0.2 < hi


def test_an_evaluation_on_unfetched_repositories_is_refused(monkeypatch, capsys):
    """Without the repositories the lock pins, the coding, research and agent-file
    conversations would be built from less text: the evaluation says so and stops, unless
    asked to measure what the machine holds."""
    monkeypatch.setattr(agent_traffic, "missing_repositories", lambda: ["encode/httpx", "pallets/flask"])
    with pytest.raises(SystemExit) as stopped:
        agent_traffic.main(["--split", "test"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "2 repositories of the real-text lock are not fetched here (encode/httpx, pallets/flask)" in error
    assert "--allow-missing" in error

"""The per-message side of the real-traffic report (eval/agent_traffic.py)."""

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

"""ConversationLockout: flags that refuse later turns, and the repeated-block lock-out."""

from __future__ import annotations

from deltaguard.lanes.lockout import ConversationLockout


def test_the_limit_refuses_the_conversation_once_with_every_category_seen():
    lockout = ConversationLockout(block_limit=3)
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None
    assert lockout.count_blocked_turn("t", "c", ["prompt_injection"]) is None
    assert lockout.flagged("t", "c") == frozenset()
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) == ["jailbreak", "prompt_injection"]
    assert lockout.flagged("t", "c") == {"jailbreak", "prompt_injection"}
    assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None  # said once


def test_secrets_and_pii_blocks_are_not_probing():
    lockout = ConversationLockout(block_limit=1)
    assert lockout.count_blocked_turn("t", "c", ["secrets", "pii"]) is None
    assert lockout.flagged("t", "c") == frozenset()


def test_no_limit_never_locks_out():
    lockout = ConversationLockout(block_limit=None)
    for _ in range(10):
        assert lockout.count_blocked_turn("t", "c", ["jailbreak"]) is None


def test_tenants_and_conversations_are_kept_apart():
    lockout = ConversationLockout(block_limit=1)
    lockout.mark("a", "c", ["jailbreak"])
    assert lockout.flagged("b", "c") == frozenset()
    assert lockout.flagged("a", "other") == frozenset()
    lockout.mark("a", "c", ["toxicity"])
    assert lockout.flagged("a", "c") == {"jailbreak", "toxicity"}

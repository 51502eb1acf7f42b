"""The domain's errors carry what happened, never how a client is told of it."""

from __future__ import annotations

import pytest

from deltaguard import errors
from deltaguard.errors import DeltaGuardError, TurnBlocked


def test_a_blocked_turn_names_its_categories():
    err = TurnBlocked(["prompt_injection", "secrets"])
    assert (
        err.message == str(err) == "The request was blocked by the safety stage: prompt_injection, secrets."
    )
    assert err.categories == ["prompt_injection", "secrets"] and err.locked_until is None


def test_a_lock_out_says_why_and_until_when():
    err = TurnBlocked(["jailbreak"], why="3 turns of this conversation were blocked", until=1_700_000_000.7)
    assert err.locked_until == 1_700_000_000 and err.why == "3 turns of this conversation were blocked"
    assert err.message == (
        "This conversation is locked: 3 turns of this conversation were blocked (jailbreak); "
        "locked until 2023-11-14T22:13:20Z."
    )


@pytest.mark.parametrize("name", ["status", "type", "code", "to_error"])
def test_no_domain_error_knows_http(name):
    assert not hasattr(TurnBlocked(["secrets"]), name)
    assert not hasattr(errors, "RequestError")


def test_every_error_is_a_deltaguard_error_and_the_older_name_still_imports():
    assert errors.SafetyBlocked is TurnBlocked
    for value in vars(errors).values():
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == errors.__name__:
            assert issubclass(value, DeltaGuardError), value

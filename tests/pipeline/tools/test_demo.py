"""`deltaguard demo`: the gateway and a scripted agent, each turn labelled as what was sent."""

from __future__ import annotations

import asyncio

from deltaguard.tools.demo import run_demo


def test_each_turn_is_labelled_as_what_the_agent_sent(capsys):
    assert asyncio.run(run_demo(turns=10, tool_tokens=60, tokens_per_s=100_000)) == 0
    lines = capsys.readouterr().out.splitlines()
    turn = {n: [x for x in lines if x.split()[:1] == [str(n)]] for n in (4, 9)}
    # The injected page is refused, then resent without it: the retry is not the page.
    blocked, retried = turn[4]
    assert "BLOCK" in blocked and "web page with an injection" in blocked
    assert "web page with an injection" not in retried and "refused content removed" in retried
    assert "allow" in retried
    blocked, retried = turn[9]
    assert "BLOCK" in blocked and "completes an AWS key" in blocked
    assert "refused content removed" in retried and "AWS" not in retried

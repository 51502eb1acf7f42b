"""The request-path tracer: calls into the package from one task, and the modules it
returns to; loops folded."""

from __future__ import annotations

import asyncio
import sys

from deltaguard.items import count_tokens, new_item
from eval.request_path import Step, Tracer, fold, report


def test_fold_folds_a_repeated_block_once_with_its_count():
    a, b, c = (Step("m.py", name, False) for name in "abc")
    assert fold([a, b, a, b, a, b, c]) == [([a, b], 3), ([c], 1)]
    assert fold([a, c]) == [([a], 1), ([c], 1)]


def test_a_module_entered_again_after_it_was_left_is_a_return_but_not_while_it_is_open():
    tracer = Tracer("entry")

    async def entry() -> None:
        tracer.task = asyncio.current_task()
        tracer.on = True
        count_tokens("one")  # enters items.py and leaves it
        count_tokens("two")  # goes back into it: a return
        new_item("message", "user", "hi", {"content": "hi"})  # calls count_tokens while open
        tracer.on = False

    _run_traced(tracer, entry)
    steps = [(s.function, s.returns) for s in tracer.steps()]
    steps = [step for step in steps if step[0] != "_count_slice"]  # count_tokens' own helper
    assert steps[:2] == [("count_tokens", False), ("count_tokens", True)]
    assert ("new_item", True) in steps and steps[-1] == ("count_tokens", False), steps
    assert "returns to a module already left (<): 2" in report(tracer.steps())


def test_a_generator_suspended_at_a_yield_is_still_open():
    """A module whose generator is suspended (not finished) is open: entering it then is
    not a return, whether the generator finishes before the trace ends or after."""
    from deltaguard.lanes.output_stream import OutputStreamScorer

    tracer = Tracer("entry")

    async def events():
        yield {"type": "response.output_text.delta", "delta": "hi"}
        yield {"type": "response.completed"}

    async def entry() -> None:
        tracer.task = asyncio.current_task()
        scorer = OutputStreamScorer([])
        tracer.on = True
        watched = scorer.watched(events(), lambda e: e.get("delta"))
        await watched.__anext__()  # suspended at its first yield
        scorer.raised("more", ())  # into output_stream.py while the generator is open
        tracer.on = False
        await watched.aclose()

    _run_traced(tracer, entry)
    steps = [(s.function, s.returns) for s in tracer.steps()]
    assert ("OutputStreamScorer.raised", False) in steps, steps
    assert not any(returns for _, returns in steps), steps


def _run_traced(tracer: Tracer, entry) -> None:
    sys.setprofile(tracer)
    try:
        asyncio.run(entry())
    finally:
        sys.setprofile(None)

"""close_source: a stream left mid-way stops its producer on this task, now."""

from __future__ import annotations

from deltaguard.streams import close_source


async def test_a_generator_left_mid_way_runs_its_finally_when_closed():
    ran = []

    async def producer():
        try:
            yield 1
            yield 2
        finally:
            ran.append("closed")

    stream = producer()
    assert await anext(stream) == 1
    await close_source(stream)
    assert ran == ["closed"]


async def test_a_source_that_cannot_be_closed_is_left_as_it_is():
    await close_source(iter([1, 2]))  # a plain iterator: nothing to close, no error

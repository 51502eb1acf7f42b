"""The one thread pool classifier work runs on: created at startup, injected everywhere."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class InferenceLimiter:
    """Runs classifier folds off the event loop on a fixed number of threads.

    One per process: the safety stage creates it at `start()` unless one is given, and
    whatever shares the stage's classifiers (the LiteLLM adapter) runs on the stage's."""

    def __init__(self, threads: int) -> None:
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="deltaguard-infer")

    async def run(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

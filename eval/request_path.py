"""The path of one request through the package, function by function.

    python -m eval.request_path [--out eval/out/request_path.md]

A real gateway on 127.0.0.1 (the simulated upstream, the default classifiers) is sent
two WebSocket `response.create` frames: a user message, then a continuation carrying
a tool output. The second is traced with `sys.setprofile`: every call into the package
made by the task that serves the socket, from the frame's arrival to its terminal event
(classifier work on the inference threads and the lanes' own tasks are not on it).

Listed as `module:function`, in order. Consecutive repeats of a block of steps (a loop
over items, or over the streamed deltas) are folded into one with a count. A step
marked `<` returns to a module already left: the module was entered before on this path
and none of its calls is still open. That is what "a turn goes down once and comes back
once" counts: a module the path leaves and then has to go back into. A coroutine
suspended at an `await` (or a generator at a `yield`) is still open until it finishes,
even when that is after the trace ends; resuming one is not a call. The summary also
counts the distinct functions those returns enter (a loop's returns are one each), and,
the older way, every step into a module seen before other than the previous step's.
"""

from __future__ import annotations

import argparse
import asyncio
import dis
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

from websockets.sync.client import connect

import deltaguard
from deltaguard.gateway.config import GatewayConfig
from deltaguard.state.loading import build_scorer
from deltaguard.tools.gateway_thread import gateway_thread

PACKAGE = str(Path(deltaguard.__file__).parent) + "/"
OUT = Path(__file__).resolve().parent / "out"
_HIDDEN = ("<genexpr>", "<lambda>", "<listcomp>", "<dictcomp>", "<setcomp>")
_FOLD_WIDTH = 12  # the longest block of steps folded as a loop


@dataclass(frozen=True, slots=True)
class Step:
    module: str  # relative to the package folder
    function: str
    returns: bool  # re-enters a module already left


class Tracer:
    """Calls into the package from one asyncio task, with each frame's lifetime."""

    def __init__(self, entry: str) -> None:
        self.entry = entry  # the function whose task is traced
        self.on = False
        self.task: asyncio.Task[Any] | None = None
        self.events: list[tuple[str, int, str, str, bool]] = []  # kind, frame, module, function, new
        self._frames: list[FrameType] = []  # kept alive, so that frame ids stay unique
        self._starts: dict[CodeType, int] = {}

    def _start(self, code: CodeType) -> int:
        """The offset where a call of `code` begins running its body (after its prologue)."""
        if code not in self._starts:
            ops = [i.offset for i in dis.get_instructions(code) if i.opname == "RESUME"]
            self._starts[code] = ops[0] if ops else 0
        return self._starts[code]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on or event not in ("call", "return"):
            return
        path = frame.f_code.co_filename
        if not path.startswith(PACKAGE):
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:
            return
        name = frame.f_code.co_qualname
        if self.task is None and name == self.entry:
            self.task = task
        if task is None or task is not self.task:
            return
        new = event == "call" and frame.f_lasti <= self._start(frame.f_code)
        if new:
            self._frames.append(frame)
        if event == "return" and _suspends(frame):
            event = "suspend"  # a generator or coroutine at a yield or an await: still open
        self.events.append((event, id(frame), path[len(PACKAGE) :], name, new))

    def steps(self) -> list[Step]:
        last_return: dict[int, int] = {}
        for i, (kind, fid, *_rest) in enumerate(self.events):
            if kind == "return":
                last_return[fid] = i
        calls = [
            (i, fid, m, n) for i, (kind, fid, m, n, new) in enumerate(self.events) if kind == "call" and new
        ]
        spans = [(m, i, last_return.get(fid, len(self.events))) for i, fid, m, _n in calls]
        entered: set[str] = set()
        out = []
        for i, _fid, module, name in calls:
            if any(h in name for h in _HIDDEN):
                continue
            open_ = any(m == module and start < i <= end for m, start, end in spans)
            out.append(Step(module, name, module in entered and not open_))
            entered.add(module)
        return out


_YIELD = dis.opmap["YIELD_VALUE"]


def _suspends(frame: FrameType) -> bool:
    """The frame leaves at a yield (a generator's, or an await's), to be resumed later."""
    return frame.f_code.co_code[frame.f_lasti] == _YIELD


def fold(steps: list[Step]) -> list[tuple[list[Step], int]]:
    """Consecutive repeats of a block of steps, as (block, count)."""
    out, i = [], 0
    while i < len(steps):
        best_w, best_k = 1, 1
        for w in range(1, _FOLD_WIDTH + 1):
            block, k = steps[i : i + w], 1
            while steps[i + k * w : i + (k + 1) * w] == block:
                k += 1
            if k > 1 and w * k > best_w * best_k:
                best_w, best_k = w, k
        out.append((steps[i : i + best_w], best_k))
        i += best_w * best_k
    return out


def trace() -> list[Step]:
    """One traced WebSocket turn carrying a tool output."""
    tracer = Tracer("Gateway._ws_turn")
    scorer = build_scorer()
    threading.setprofile(lambda *_: sys.setprofile(tracer))
    try:
        with gateway_thread(GatewayConfig(port=0, sim_tokens_per_s=20_000), scorer) as (base, _app):
            url = base.replace("http://", "ws://") + "/v1/responses"
            with connect(url, additional_headers={"Authorization": "Bearer test"}) as ws:
                first = _turn(
                    ws, {"input": [{"role": "user", "content": "Read setup.py; list its dependencies."}]}
                )
                output = (
                    f"from setuptools import setup\nsetup(name='demo', install_requires={['requests']!r})\n"
                )
                item = {"type": "function_call_output", "call_id": "call_1", "output": output}
                tracer.on = True
                last = _turn(ws, {"previous_response_id": first["response"]["id"], "input": [item]})
                tracer.on = False
    finally:
        threading.setprofile(None)
    if last["type"] != "response.completed":
        raise RuntimeError(f"the traced turn ended with {last['type']}: {last}")
    return tracer.steps()


def _turn(ws: Any, body: dict[str, Any]) -> dict[str, Any]:
    ws.send(json.dumps({"type": "response.create", "model": "sim", **body}))
    while True:
        event = json.loads(ws.recv())
        if event["type"] in ("response.completed", "response.failed", "error"):
            return event


def report(steps: list[Step]) -> str:
    lines, n = [], 0
    for block, count in fold(steps):
        for j, step in enumerate(block):
            n += 1
            mark = "<" if step.returns else " "
            tag = ""
            if j == 0 and count > 1:
                tag = f"  (x{count}" + (f", a block of {len(block)} steps" if len(block) > 1 else "") + ")"
            lines.append(f"{n:4}. {mark} pipeline/{step.module}:{step.function}{tag}")
    folded = [s for block, _count in fold(steps) for s in block]
    seen: set[str] = set()
    moves = 0  # steps into a module seen before, other than the previous step's
    for prev, step in zip([None, *folded], folded, strict=False):
        moves += step.module in seen and (prev is None or prev.module != step.module)
        seen.add(step.module)
    sites = {(s.module, s.function) for s in steps if s.returns}
    summary = (
        f"{len(folded)} steps through {len({(s.module, s.function) for s in folded})} functions in "
        f"{len(seen)} modules; returns to a module already left (<): {sum(s.returns for s in folded)}, "
        f"at {len(sites)} distinct functions; steps into a module seen before, counting calls "
        f"within an open one: {moves}"
    )
    return "\n".join([summary, "", *lines, ""])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT / "request_path.md")
    args = p.parse_args(argv)
    text = report(trace())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text.splitlines()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())

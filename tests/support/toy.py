"""A tiny classifier for store and lane tests: it remembers how many items it folded."""

from __future__ import annotations

import threading
import time

from deltaguard.classifiers.base import Update, count_tokens, running_max
from deltaguard.classifiers.provenance import ProvenanceClassifier


class ItemCounter:
    """Flags `secrets` once it has seen an item containing the word 'BOOM'."""

    name = "counter"
    version = "test"
    categories = ("secrets",)
    lane = "gate"
    max_state_bytes = 200

    def __init__(self, name: str = "counter", lane: str = "gate") -> None:
        self.name = name
        self.lane = lane
        self.calls = 0
        self.items_seen = 0

    def initial_state(self):
        return {"n": 0, "max": {}}

    def update(self, state, items):
        self.calls += 1
        self.items_seen += len(items)
        rows = [{"secrets": 1.0 if "BOOM" in i.text else 0.0} for i in items]
        scores = running_max(state["max"], rows)
        return Update(
            state={"n": state["n"] + len(items), "max": scores},
            item_scores=rows,
            scores=scores,
            tokens=sum(count_tokens(i.text) for i in items),
        )


class BatchingCounter(ItemCounter):
    """An `ItemCounter` that offers `update_batch`, and remembers each batch's size.

    `hold`, when given, is a `threading.Event` the first call waits for (`entered` is set
    once it waits): a lane test fills the queue behind it meanwhile. `fail_on`: a text
    whose request raises, batched or not."""

    def __init__(self, name: str = "batching", lane: str = "monitor", hold=None, fail_on=None) -> None:
        super().__init__(name, lane)
        self.batches: list[int] = []
        self.hold = hold
        self.entered = threading.Event()
        self.fail_on = fail_on

    def _wait(self) -> None:
        if self.hold is not None and not self.entered.is_set():
            self.entered.set()
            self.hold.wait(10)

    def update(self, state, items):
        self._wait()
        if self.fail_on is not None and any(self.fail_on in i.text for i in items):
            raise RuntimeError(f"cannot score {self.fail_on!r}")
        return super().update(state, items)

    def update_batch(self, requests):
        self._wait()
        self.batches.append(len(requests))
        return [self.update(state, items) for state, items in requests]


class SlowInjectionMarker:
    """A monitor-lane stand-in: flags `prompt_injection` in a tool output holding `marker`,
    after `delay_s` (an expensive model's time); `finished` holds when each verdict was in."""

    version = "test"
    categories = ("prompt_injection",)
    lane = "monitor"
    max_state_bytes = 200

    def __init__(self, delay_s: float = 0.3, marker: str = "IGNORE PREVIOUS", name: str = "marker") -> None:
        self.name = name
        self.delay_s = delay_s
        self.marker = marker
        self.finished: list[float] = []

    def initial_state(self):
        return {"max": {}}

    def update(self, state, items):
        time.sleep(self.delay_s)
        rows = [
            {"prompt_injection": 1.0 if i.role == "tool" and self.marker in i.text else 0.0} for i in items
        ]
        scores = running_max(state["max"], rows)
        self.finished.append(time.monotonic())
        return Update(state={"max": scores}, item_scores=rows, scores=scores, tokens=0)


class StatedScore(ItemCounter):
    """A monitor-lane classifier whose `prompt_injection` score is what an item states:
    "score=0.7" anywhere in its text or attached files gives 0.7 (policy tests need scores
    between thresholds)."""

    categories = ("prompt_injection",)

    def __init__(self, name: str = "stated", lane: str = "monitor") -> None:
        super().__init__(name, lane)

    def update(self, state, items):
        rows = []
        for item in items:
            _, found, rest = f"{item.text} {item.attachments}".partition("score=")
            rows.append({"prompt_injection": float(rest.split()[0]) if found else 0.0})
        scores = running_max(state["max"], rows)
        tokens = sum(count_tokens(i.text) for i in items)
        return Update(
            state={"n": state["n"] + len(items), "max": scores},
            item_scores=rows,
            scores=scores,
            tokens=tokens,
        )


class ManualClock:
    """A clock a test moves by hand (`clock.now = 11`)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class HeldProvenance(ProvenanceClassifier):
    """The provenance classifier whose folds, once `armed` is set, wait for `release` (at
    most 10 s) before folding: a test sees what goes on while the sketch is being folded.
    `entered`: a fold is waiting; `late`: one gave up waiting, the release never came."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.late = False

    def update(self, state, items):
        if self.armed.is_set():
            self.entered.set()
            if not self.release.wait(10):
                self.late = True
        return super().update(state, items)

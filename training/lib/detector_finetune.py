"""Fine-tuning the truncated base encoder and its heads on a windows file, in the build venv:
`python -m training.lib.detector_finetune WINDOWS BASE OUT EPOCHS`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from training.lib.detector_spec import (
    BATCH,
    HEAD_LR,
    LAYERS,
    LR,
    SEED,
    TRAIN_THREADS,
    WARMUP,
    log,
)


def finetune(
    windows_file: str, base: str, out_dir: str, epochs: int, layers: int = LAYERS, lr: float = LR
) -> None:
    """Fine-tune the base encoder, truncated to its first `layers`, on the windows (one head
    per target); save the encoder and the heads."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(SEED)
    torch.set_num_threads(TRAIN_THREADS)
    with open(windows_file) as f:
        data = [json.loads(line) for line in f]
    w = np.array([d["w"] for d in data], dtype=np.float32)
    y = np.array([[0.0 if math.isnan(t) else t for t in d["targets"]] for d in data], dtype=np.float32)
    bert = AutoModel.from_pretrained(base, attn_implementation="eager", add_pooling_layer=False)
    bert.encoder.layer = bert.encoder.layer[:layers]
    bert.config.num_hidden_layers = len(bert.encoder.layer)
    bert.embeddings.word_embeddings.weight.requires_grad_(False)
    heads = torch.nn.Linear(bert.config.hidden_size, y.shape[1])
    torch.nn.init.zeros_(heads.bias)
    # Cosine-similarity-like logits need a scale: start the heads at norm ~10.
    torch.nn.init.normal_(heads.weight, std=10.0 / math.sqrt(bert.config.hidden_size))
    params = [
        {"params": [p for p in bert.parameters() if p.requires_grad], "lr": lr, "weight_decay": 0.01},
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fine-tune the detector on a windows file (build venv)")
    parser.add_argument("windows")
    parser.add_argument("base")
    parser.add_argument("out")
    parser.add_argument("epochs", type=int)
    parser.add_argument("--layers", type=int, default=LAYERS, help="the base's first layers kept")
    parser.add_argument("--lr", type=float, default=LR, help="the encoder's learning rate")
    args = parser.parse_args(argv)
    finetune(args.windows, args.base, args.out, args.epochs, args.layers, args.lr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export and int8 quantization of a BERT encoder (build venv only: torch, transformers,
onnx): `python -m training.lib.onnx_export export MODEL_DIR OUT` and
`python -m training.lib.onnx_export quantize FLOAT PER_TOKEN_OUT DYNAMIC_OUT`.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

import numpy as np


def export_float(model_dir: str, out: str) -> None:
    """torch.onnx.export of the BERT encoder: ids, mask, type ids -> last_hidden_state."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()

    class LastHiddenState(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tuple(torch.ones(2, 16, dtype=torch.long) for _ in names)
    axes = {n: {0: "batch", 1: "seq"} for n in [*names, "last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(
            LastHiddenState(model),
            example,
            out,
            dynamo=False,
            opset_version=17,
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
        )


def quantize_per_token(src: str, out: str, keep: np.ndarray | None = None) -> None:
    """int8 MatMuls with one activation scale per token row, int8 word embeddings.

    onnxruntime's dynamic quantization takes one activation scale over the whole batch
    tensor, so a window's embedding would depend on its batch neighbours and padding.
    Here each MatMul input row (one token) gets its own symmetric scale, computed in the
    graph (max |x| / 127); weights are symmetric int8 per output channel. Rows of the
    same tensor (Q, K, V read one LayerNorm output) share one quantization. The integer
    product runs as MatMulInteger u8 x s8 (zero point 128), which MLAS accelerates.

    `keep` (sorted token ids, the unknown token's first) prunes the word embeddings to
    those rows: the graph maps every other id to the first kept row through an int32
    table, so the tokenizer is unchanged and a 250k-piece vocabulary costs only the rows
    it keeps.
    """
    import onnx
    from onnx import TensorProto
    from onnx import helper as oh
    from onnx import numpy_helper as nh

    model = onnx.load(src)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    added: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        added.append(nh.from_array(np.asarray(value), name))
        return name

    const("q_one", np.array(1.0, np.float32))
    const("q_zero_point", np.array(128, np.uint8))
    const("q_eps", np.array(1e-12, np.float32))
    const("q_inv127", np.array(1 / 127, np.float32))
    nodes: list[Any] = []
    quantized: dict[str, tuple[str, str]] = {}

    def quantize_rows(x: str) -> tuple[str, str]:
        if x not in quantized:
            p = f"q_act{len(quantized)}"
            nodes.extend(
                [
                    oh.make_node("Abs", [x], [f"{p}_abs"]),
                    oh.make_node("ReduceMax", [f"{p}_abs"], [f"{p}_max"], axes=[-1], keepdims=1),
                    oh.make_node("Max", [f"{p}_max", "q_eps"], [f"{p}_max_eps"]),
                    oh.make_node("Mul", [f"{p}_max_eps", "q_inv127"], [f"{p}_scale"]),
                    oh.make_node("Div", [x, f"{p}_scale"], [f"{p}_scaled"]),
                    oh.make_node("QuantizeLinear", [f"{p}_scaled", "q_one", "q_zero_point"], [f"{p}_u8"]),
                ]
            )
            quantized[x] = (f"{p}_u8", f"{p}_scale")
        return quantized[x]

    n_matmul = 0
    for node in graph.node:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is None or len(weight.dims) != 2:
            nodes.append(node)
            continue
        w = nh.to_array(inits.pop(node.input[1])).astype(np.float32)
        w_scale = np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0
        p = f"q_mm{n_matmul}"
        n_matmul += 1
        const(f"{p}_w", np.clip(np.round(w / w_scale), -127, 127).astype(np.int8))
        const(f"{p}_w_scale", w_scale.astype(np.float32))
        x_u8, x_scale = quantize_rows(node.input[0])
        nodes.extend(
            [
                oh.make_node("MatMulInteger", [x_u8, f"{p}_w", "q_zero_point"], [f"{p}_i32"]),
                oh.make_node("Cast", [f"{p}_i32"], [f"{p}_f32"], to=TensorProto.FLOAT),
                oh.make_node("Mul", [f"{p}_f32", f"{p}_w_scale"], [f"{p}_cols"]),
                oh.make_node("Mul", [f"{p}_cols", x_scale], [node.output[0]]),
            ]
        )

    # Word embeddings (most of the file): int8 rows, each with its scale.
    gather = next(n for n in nodes if n.op_type == "Gather" and "word_embeddings" in n.input[0])
    table = nh.to_array(inits.pop(gather.input[0])).astype(np.float32)
    ids = gather.input[1]
    if keep is not None:
        remap = np.zeros(len(table), np.int32)  # dropped ids -> row 0, the unknown token's
        remap[keep] = np.arange(len(keep), dtype=np.int32)
        table = table[keep]
        const("q_vocab", remap)
        nodes.insert(nodes.index(gather), oh.make_node("Gather", ["q_vocab", ids], ["q_ids"], axis=0))
        ids = "q_ids"
    row_scale = np.maximum(np.abs(table).max(axis=1, keepdims=True), 1e-12) / 127.0
    const("q_emb", np.clip(np.round(table / row_scale), -127, 127).astype(np.int8))
    const("q_emb_scale", row_scale.astype(np.float32))
    at = nodes.index(gather)
    nodes[at : at + 1] = [
        oh.make_node("Gather", ["q_emb", ids], ["q_emb_i8"], axis=0),
        oh.make_node("Gather", ["q_emb_scale", ids], ["q_emb_rows"], axis=0),
        oh.make_node("Cast", ["q_emb_i8"], ["q_emb_f32"], to=TensorProto.FLOAT),
        oh.make_node("Mul", ["q_emb_f32", "q_emb_rows"], [gather.output[0]]),
    ]
    del graph.node[:]
    graph.node.extend(nodes)
    kept = list(inits.values())
    del graph.initializer[:]
    graph.initializer.extend(kept + added)
    onnx.checker.check_model(model)
    onnx.save(model, out)
    print(f"per-token int8: {n_matmul} MatMuls over {len(quantized)} quantized activations")


def quantize_dynamic_reference(src: str, out: str) -> None:
    """docs/data.md's measured recipe, kept for comparison: per-tensor activation scales."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(src, out, per_channel=True, op_types_to_quantize=["MatMul"], weight_type=QuantType.QInt8)


def quantize(float_model: str, per_token_out: str, dynamic_out: str, keep: str | None = None) -> None:
    """The int8 candidates of a float export: per-token (served) and dynamic (reference)."""
    quantize_per_token(float_model, per_token_out, None if keep is None else np.load(keep))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic_reference(float_model, dynamic_out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_export = sub.add_parser("export", help="export the float ONNX model")
    p_export.add_argument("model_dir")
    p_export.add_argument("out")
    p_quant = sub.add_parser("quantize", help="build the int8 candidates")
    p_quant.add_argument("float_model")
    p_quant.add_argument("per_token_out")
    p_quant.add_argument("dynamic_out")
    p_quant.add_argument("--keep", default=None, help=".npy of the token ids whose embeddings are kept")
    args = parser.parse_args(argv)
    if args.command == "export":
        export_float(args.model_dir, args.out)
    else:
        quantize(args.float_model, args.per_token_out, args.dynamic_out, args.keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())

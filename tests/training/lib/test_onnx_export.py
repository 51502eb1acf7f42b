"""Per-token int8 export: a pruned vocabulary reads kept ids exactly as the full table does
and every other id as the first kept row (the unknown token's)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the export needs onnx (train extra)")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper as nh  # noqa: E402

from training.lib.onnx_export import quantize_per_token  # noqa: E402

VOCAB, HIDDEN = 50, 8


@pytest.fixture()
def float_model(tmp_path):
    """input_ids -> word embeddings -> one MatMul: the part of a BERT export the quantizer rewrites."""
    rng = np.random.default_rng(3)
    table = rng.normal(size=(VOCAB, HIDDEN)).astype(np.float32)
    weight = rng.normal(size=(HIDDEN, HIDDEN)).astype(np.float32)
    graph = oh.make_graph(
        [
            oh.make_node("Gather", ["embeddings.word_embeddings.weight", "input_ids"], ["emb"], axis=0),
            oh.make_node("MatMul", ["emb", "w"], ["last_hidden_state"]),
        ],
        "tiny",
        [oh.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])],
        [oh.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [None, None, HIDDEN])],
        [nh.from_array(table, "embeddings.word_embeddings.weight"), nh.from_array(weight, "w")],
    )
    path = tmp_path / "float.onnx"
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]), path)
    return path


def run(path, ids):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input_ids": np.array([ids], dtype=np.int64)})[0][0]


def test_a_pruned_vocabulary_keeps_its_rows_and_reads_the_rest_as_unknown(float_model, tmp_path):
    full, pruned = tmp_path / "full.onnx", tmp_path / "pruned.onnx"
    quantize_per_token(str(float_model), str(full))
    keep = np.array([3, 0, 1, 7, 20], dtype=np.int64)  # the unknown token (3) first
    quantize_per_token(str(float_model), str(pruned), keep)
    assert pruned.stat().st_size < full.stat().st_size
    kept = [0, 1, 3, 7, 20]
    np.testing.assert_array_equal(run(pruned, kept), run(full, kept))
    np.testing.assert_array_equal(run(pruned, [5, 49, 21]), run(full, [3, 3, 3]))

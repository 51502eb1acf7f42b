"""The E5S1 reader (training/lib/e5.py) on small synthetic files written here.

The writer below follows the format as DATA.md and the wheel's e5.c describe it and is
deliberately independent of the reader (struct packing, one block at a time), so the
tests pin the layout rather than echo the implementation. No torch, no 72 MB wheel.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from training.lib.e5 import (
    bert_state_dict,
    check_pieces,
    dequantize_q4_0,
    mean_pool,
    parse_e5s1,
    read_e5s1,
)

CONFIG = {"hidden": 32, "layers": 1, "heads": 2, "ff": 64, "vocab": 5, "max_positions": 8, "type_vocab": 2}
PIECES = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁Grüße", -7.25), ("日本", -9.5)]
SPECIALS = (0, 2, 1, 3)  # bos, eos, pad, unk


def q4_block(scale: float, weights: list[int]) -> bytes:
    """One Q4_0 block: fp16 scale, then byte j = (w[j] + 8) | (w[j + 16] + 8) << 4."""
    assert len(weights) == 32 and all(-8 <= w <= 7 for w in weights)
    nibbles = bytes((weights[j] + 8) | ((weights[j + 16] + 8) << 4) for j in range(16))
    return struct.pack("<e", scale) + nibbles


def q4_tensor(rows: int, cols: int, seed: int) -> tuple[bytes, np.ndarray]:
    """Random integer weights and fp16-exact scales, with the float values they stand for."""
    rng = np.random.default_rng(seed)
    raw, values = b"", []
    for _ in range(rows * cols // 32):
        scale = float(rng.choice([0.5, -0.25, 0.0078125, 3.0]))
        weights = [int(w) for w in rng.integers(-8, 8, size=32)]
        raw += q4_block(scale, weights)
        values.extend(w * scale for w in weights)
    return raw, np.array(values, dtype=np.float32).reshape(rows, cols)


def pieces_section(pieces: list[tuple[str, float]]) -> bytes:
    blobs = [p.encode("utf-8") for p, _ in pieces]
    offsets = np.cumsum([0, *map(len, blobs)]).astype("<u4")
    norm = struct.pack("<IB", 0x3000, 1) + struct.pack("<I", 0x20)  # ideographic space -> space
    return (
        struct.pack("<5i", len(pieces), *SPECIALS)
        + struct.pack("<Q", sum(map(len, blobs)))
        + offsets.tobytes()
        + np.array([s for _, s in pieces], dtype="<f4").tobytes()
        + b"".join(blobs)
        + struct.pack("<iI", 1, len(norm))
        + norm
    )


def tensors_fixture() -> tuple[dict[str, tuple[int, int, bytes]], dict[str, np.ndarray]]:
    """name -> (dtype, element count, bytes), and the arrays the reader should return."""
    h, ff = CONFIG["hidden"], CONFIG["ff"]
    rng = np.random.default_rng(7)
    stored, expected = {}, {}
    for name, (rows, cols), seed in (
        ("emb.word", (5, h), 1),
        ("l0.fi.w", (ff, h), 2),
        ("l0.fo.w", (h, ff), 3),
    ):
        raw, values = q4_tensor(rows, cols, seed)
        stored[name], expected[name] = (1, rows * cols, raw), values
    for name, shape in (("emb.pos", (8, h)), ("emb.type", (2, h)), ("l0.q.b", (h,)), ("l0.aln.w", (h,))):
        values = rng.standard_normal(shape).astype(np.float32)
        stored[name], expected[name] = (0, values.size, values.astype("<f4").tobytes()), values
    return stored, expected


def e5s1_bytes(magic: bytes = b"E5S1") -> bytes:
    header = magic + struct.pack("<I7ifi", 1, *CONFIG.values(), 1e-12, 32)
    body = header + pieces_section(PIECES)
    stored, _ = tensors_fixture()
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n in stored)
    offset = len(body) + directory_size
    directory, data = struct.pack("<i", len(stored)), b""
    for name, (dtype, count, raw) in stored.items():
        directory += (
            struct.pack("<H", len(name))
            + name.encode()
            + struct.pack("<BIQQ", dtype, count, offset, len(raw))
        )
        data += raw
        offset += len(raw)
    return body + directory + data


@pytest.fixture
def e5s1_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.bin"
    path.write_bytes(e5s1_bytes())
    return path


def test_header_and_specials(e5s1_file):
    config, _, _ = read_e5s1(e5s1_file)
    for key, value in CONFIG.items():
        assert config[key] == value
    assert config["layer_norm_eps"] == 1e-12
    assert (config["bos_id"], config["eos_id"], config["pad_id"], config["unk_id"]) == SPECIALS


def test_pieces_and_scores_in_id_order(e5s1_file):
    _, pieces, _ = read_e5s1(e5s1_file)
    assert pieces == PIECES  # scores chosen exact in float32


def test_tensors_recovered_exactly(e5s1_file):
    _, _, tensors = read_e5s1(e5s1_file)
    _, expected = tensors_fixture()
    assert set(tensors) == set(expected)
    for name, values in expected.items():
        assert tensors[name].dtype == np.float32
        assert tensors[name].shape == values.shape, name
        np.testing.assert_array_equal(tensors[name], values, err_msg=name)


def test_fo_matrix_rows_are_ff_wide(e5s1_file):
    _, _, tensors = read_e5s1(e5s1_file)
    assert tensors["l0.fi.w"].shape == (CONFIG["ff"], CONFIG["hidden"])  # [out, in] like nn.Linear
    assert tensors["l0.fo.w"].shape == (CONFIG["hidden"], CONFIG["ff"])


def test_q4_0_low_nibbles_are_the_first_16_weights():
    block = struct.pack("<e", 0.5) + bytes([0x0F] + [0x88] * 15)  # byte 0: low 15, high 0
    weights = dequantize_q4_0(block, 32)
    assert weights[0] == (15 - 8) * 0.5
    assert weights[16] == (0 - 8) * 0.5
    assert np.all(weights[1:16] == 0) and np.all(weights[17:] == 0)


def test_q4_0_rejects_partial_blocks():
    with pytest.raises(ValueError):
        dequantize_q4_0(q4_block(1.0, [0] * 32), 16)
    with pytest.raises(ValueError):
        dequantize_q4_0(q4_block(1.0, [0] * 32)[:-1], 32)


def test_bad_magic_raises(tmp_path):
    path = tmp_path / "bad.bin"
    path.write_bytes(e5s1_bytes(magic=b"GGUF"))
    with pytest.raises(ValueError, match="magic"):
        read_e5s1(path)
    with pytest.raises(ValueError):
        parse_e5s1(b"E5")


@pytest.mark.parametrize("keep", [4, 20, 60, 120, 200, -1, -100])
def test_truncation_raises(keep):
    data = e5s1_bytes()
    with pytest.raises(ValueError, match=r"truncated|inconsistent"):
        parse_e5s1(data[:keep])


def test_state_dict_names_cover_the_bert_layer():
    tensors = {"emb.word": 0, "emb.pos": 0, "emb.type": 0, "emb.ln.w": 0, "emb.ln.b": 0}
    for part in ("q", "k", "v", "ao", "aln", "fi", "fo", "oln"):
        tensors |= {f"l0.{part}.w": 0, f"l0.{part}.b": 0, f"l1.{part}.w": 0, f"l1.{part}.b": 0}
    state = bert_state_dict(tensors, layers=1)  # cut to the first layer
    assert len(state) == 5 + 16
    assert "encoder.layer.0.attention.self.query.weight" in state
    assert "encoder.layer.0.output.LayerNorm.bias" in state
    assert not any(k.startswith("encoder.layer.1.") for k in state)


def test_check_pieces_against_tokenizer_json():
    import json

    good = json.dumps({"model": {"vocab": [[p, s] for p, s in PIECES]}}).encode()
    check_pieces(PIECES, good)
    bad = json.dumps({"model": {"vocab": [[p, s] for p, s in reversed(PIECES)]}}).encode()
    with pytest.raises(ValueError):
        check_pieces(PIECES, bad)


def test_mean_pool_ignores_padding():
    hidden = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    pooled = mean_pool(hidden, np.array([[1, 1, 0]]))
    np.testing.assert_allclose(pooled, [[1.0, 0.0]])

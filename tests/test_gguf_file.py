"""checkpoints.gguf_file: our one-pass GGUF header parser reads what the gguf package's GGUFReader reads, on a file
its GGUFWriter wrote (every value type, a custom alignment, block-quantized and float tensors) and on the SmolLM2
GGUF; damaged files get the reader's EagleTrtError."""

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from eagle_trt.checkpoints.gguf_file import GGUFFile, StringArray, open_gguf
from eagle_trt.errors import EagleTrtError


def _reference_value(field):
    """A GGUFReader field as plain Python: scalars, strings, lists; a string array as its length."""
    kinds = field.types
    if kinds[0] == gguf.GGUFValueType.ARRAY:
        if kinds[-1] == gguf.GGUFValueType.STRING:
            return ("strings", len(field.data))
        return [field.parts[i].tolist()[0] for i in field.data]
    if kinds[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    return field.parts[field.data[0]].tolist()[0]


def _ours_value(value):
    return ("strings", len(value)) if isinstance(value, StringArray) else value


def assert_same_as_gguf(path):
    ours, ref = GGUFFile(path), gguf.GGUFReader(str(path))
    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}  # its own pseudo-fields
    assert set(ours.fields) == set(ref_fields)
    for key, field in ref_fields.items():
        assert _ours_value(ours.fields[key]) == _reference_value(field), key
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(ref.tensors, ours.tensors):
        assert b.tensor_type == a.tensor_type and b.shape == tuple(a.shape.tolist()), a.name
        assert b.data.dtype == a.data.dtype and b.data.shape == a.data.shape, a.name
        assert np.array_equal(b.data, a.data), a.name


def test_parser_reads_what_gguf_writes(tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("general.alignment", 64)
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 65000)
    w.add_int16("t.i16", -300)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_uint64("t.u64", 2**40)
    w.add_int64("t.i64", -(2**40))
    w.add_float64("t.f64", 1 / 3)
    w.add_string("t.str", "héllo")
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.strs", ["a", "bc", ""])
    rng = np.random.default_rng(0)
    w.add_tensor("f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((2, 4)).astype(np.float16))
    q = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("q8", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert_same_as_gguf(path)
    ours = GGUFFile(path)
    assert ours.fields["t.str"] == "héllo" and ours.fields["t.bool"] is True and len(ours.fields["t.strs"]) == 3
    q8 = next(t for t in ours.tensors if t.name == "q8")
    assert q8.shape == (64, 4) and q8.data.shape == (4, 68)  # ne0 first; a row: 2 blocks of 2 + 32 bytes
    assert open_gguf(path) is open_gguf(path)  # parsed once while unchanged


def test_parser_reads_the_smollm2_gguf_as_gguf_does():
    from eagle_trt.demo_model import find_smollm2_gguf

    assert_same_as_gguf(find_smollm2_gguf())


@pytest.mark.parametrize("content", [b"", b"GGUF", b"GGML\x03\x00\x00\x00" + bytes(16),
                                     b"GGUF\x09\x00\x00\x00" + bytes(16),
                                     b"GGUF\x03\x00\x00\x00\x01" + bytes(7) + b"\x00" * 8])
def test_a_damaged_file_is_refused_by_name(tmp_path, content):
    from eagle_trt.checkpoints.gguf_reader import gguf_config

    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(EagleTrtError, match="bad.gguf is not a readable GGUF file"):
        gguf_config(path)

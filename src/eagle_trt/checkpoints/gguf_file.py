"""A GGUF file's header: its metadata and tensor table, read in one pass, tensors as views of the mapped file.

The `gguf` package's GGUFReader builds a numpy view per value, so a tokenizer's string arrays (SmolLM2: 49k tokens
and 48k merges) made opening the demo GGUF take ~3 s, five times per engine load. Here strings of an array are
skipped by their lengths and kept as a count (what the readers ask of them), every other value is read with struct,
and the file is parsed once per (path, size, mtime) in a process. Layout (GGUF v2/v3, little-endian): magic "GGUF",
u32 version, u64 tensor count, u64 metadata count; each metadata entry a string key, u32 value type and the value
(an array: u32 element type, u64 count, the elements); each tensor a string name, u32 dims, u64 dims (ne0 first),
u32 ggml type, u64 offset into the data section, which starts at the next multiple of `general.alignment` (32).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
PLAIN_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8, "I16": np.int16,
                "I32": np.int32, "I64": np.int64}  # other types are block-quantized (or BF16): rows of bytes


@dataclass(frozen=True)
class StringArray:
    """A metadata array of strings, skipped: how many it holds."""

    count: int

    def __len__(self) -> int:
        return self.count


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (the row length) first
    tensor_type: object  # gguf.GGMLQuantizationType
    data: np.ndarray  # [ne_{n-1}, ..., ne0] for the plain dtypes, [..., bytes per row] uint8 for block types


class GGUFFile:
    def __init__(self, path: Path):
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        buf, self._pos = self._map, 0
        if buf[:4] != GGUF_MAGIC:
            raise ValueError(f"magic {bytes(buf[:4])!r} is not {GGUF_MAGIC!r}")
        version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} (this reader takes 2 and 3)")
        self._pos = 24
        self.fields: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            self.fields[key] = self._value(self._u32())
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._u32()
            dims = struct.unpack_from(f"<{n_dims}Q", buf, self._pos)
            self._pos += 8 * n_dims
            kind, offset = struct.unpack_from("<IQ", buf, self._pos)
            self._pos += 12
            infos.append((name, dims, kind, offset))
        align = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        start = -(-self._pos // align) * align
        self.tensors: list[GGUFTensor] = []
        for name, dims, kind, offset in infos:
            ggml_type = GGMLQuantizationType(kind)
            block, type_bytes = GGML_QUANT_SIZES[ggml_type]
            shape = tuple(reversed(dims))  # numpy order: rows first
            dtype = PLAIN_DTYPES.get(ggml_type.name)
            if dtype is None:  # block-quantized: each row's blocks as bytes
                dtype, shape = np.uint8, shape[:-1] + (shape[-1] // block * type_bytes,)
            count = int(np.prod(shape))
            if start + offset + count * np.dtype(dtype).itemsize > len(buf):
                raise ValueError(f"tensor {name!r} runs past the end of the file")
            data = np.frombuffer(buf, dtype, count, start + offset).reshape(shape)
            self.tensors.append(GGUFTensor(name, dims, ggml_type, data))

    def _u32(self) -> int:
        (value,) = struct.unpack_from("<I", self._map, self._pos)
        self._pos += 4
        return value

    def _string(self) -> str:
        (n,) = struct.unpack_from("<Q", self._map, self._pos)
        start, self._pos = self._pos + 8, self._pos + 8 + n
        if self._pos > len(self._map):
            raise ValueError("a string runs past the end of the file")
        return bytes(self._map[start:self._pos]).decode("utf-8")

    def _value(self, kind: int):
        if kind == STRING:
            return self._string()
        if kind == ARRAY:
            elem = self._u32()
            (count,) = struct.unpack_from("<Q", self._map, self._pos)
            self._pos += 8
            if elem == STRING:  # skipped: each is a u64 length and its bytes
                for _ in range(count):
                    (n,) = struct.unpack_from("<Q", self._map, self._pos)
                    self._pos += 8 + n
                return StringArray(count)
            if elem == ARRAY:
                return [self._value(ARRAY) for _ in range(count)]
            fmt = SCALARS[elem]
            values = list(struct.unpack_from(f"<{count}{fmt[1]}", self._map, self._pos))
            self._pos += count * struct.calcsize(fmt)
            return values
        if kind not in SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        (value,) = struct.unpack_from(SCALARS[kind], self._map, self._pos)
        self._pos += struct.calcsize(SCALARS[kind])
        return value


_OPEN: dict[tuple, GGUFFile] = {}  # (path, size, mtime_ns) -> its parsed header, for this process
MAX_OPEN = 4


def open_gguf(path: Path) -> GGUFFile:
    """`path` parsed once per process while it is unchanged (the last MAX_OPEN files kept)."""
    stat = Path(path).stat()
    key = (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _OPEN:
        _OPEN[key] = GGUFFile(Path(path))
        while len(_OPEN) > MAX_OPEN:
            _OPEN.pop(next(iter(_OPEN)))
    return _OPEN[key]

"""A streaming safetensors writer: the header is computed up front from (name, dtype, shape), then tensors are
appended one by one, so a rank file of any size is written holding one tensor in memory at a time."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
            torch.int32: "I32", torch.bool: "BOOL", torch.int8: "I8", torch.uint8: "U8"}


class StreamingSafetensorsWriter:
    def __init__(self, path: Path, entries: list[tuple[str, torch.dtype, tuple[int, ...]]]):
        self.path = Path(path)
        self.expected = [(name, dtype, tuple(shape)) for name, dtype, shape in entries]
        header, offset = {}, 0
        for name, dtype, shape in self.expected:
            size = torch.tensor([], dtype=dtype).element_size()
            for dim in shape:
                size *= dim
            header[name] = {"dtype": ST_DTYPE[dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        header["__metadata__"] = {"format": "pt"}
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # align the data section to 8 bytes
        self._fh = open(self.path, "wb")
        self._fh.write(struct.pack("<Q", len(raw)))
        self._fh.write(raw)
        self._next = 0

    def write(self, name: str, tensor: torch.Tensor) -> None:
        want_name, dtype, shape = self.expected[self._next]
        if name != want_name or tensor.dtype != dtype or tuple(tensor.shape) != shape:
            raise ValueError(f"{self.path.name}: expected {want_name} {dtype} {shape}, got {name} {tensor.dtype} "
                             f"{tuple(tensor.shape)}")
        data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy()
        self._fh.write(memoryview(data))
        self._next += 1

    def close(self) -> None:
        self._fh.close()
        if self._next != len(self.expected):
            raise ValueError(f"{self.path.name}: {len(self.expected) - self._next} tensors were never written")

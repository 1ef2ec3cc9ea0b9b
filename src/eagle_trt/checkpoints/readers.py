"""WeightReader implementations: safetensors (single / sharded index), PyTorch .bin (weights_only), GGUF.

Safetensors headers are parsed here (8-byte little-endian length + JSON) so names, shapes and dtypes are known
without touching the data, and a truncated or corrupt file is reported precisely before any heavy work.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from eagle_trt.checkpoints.weight_reader import WeightReader
from eagle_trt.errors import EagleTrtError

ST_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
             "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
             "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
ST_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"


def read_safetensors_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Parse and check one .safetensors header; returns {name: (shape, dtype)}."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise EagleTrtError(f"{path} is truncated: {size} bytes, not even a safetensors header length",
                                    "re-download or re-save the checkpoint")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or 8 + n > size:
                raise EagleTrtError(f"{path} has a corrupt safetensors header: it claims {n} header bytes but the "
                                    f"file has {size} bytes", "the file is truncated or not safetensors; re-download it")
            raw = fh.read(n)
    except PermissionError:
        raise EagleTrtError(f"cannot read {path}: permission denied", "fix the file permissions (chmod +r)") from None
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EagleTrtError(f"{path} has a corrupt safetensors header (not JSON: {exc})",
                            "the file is damaged; re-download or re-save it") from None
    if not isinstance(header, dict):
        raise EagleTrtError(f"{path} has a corrupt safetensors header (not a JSON object)", "re-download it")
    meta, data_size = {}, size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = ST_DTYPES[info["dtype"]], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise EagleTrtError(f"{path}: tensor {name!r} has an invalid header entry {info!r}",
                                "the file is damaged; re-download or re-save it") from None
        if not 0 <= begin <= end <= data_size:
            raise EagleTrtError(f"{path} is truncated: tensor {name!r} ends at byte {end} of a {data_size}-byte "
                                "data section", "re-download the file (it was cut off)")
        meta[name] = (shape, dtype)
    return meta


class SafetensorsReader(WeightReader):
    def __init__(self, path: Path, files: list[Path], index_map: dict[str, str] | None = None):
        super().__init__(path, "safetensors")
        self._file_of: dict[str, Path] = {}
        for f in files:
            for name, meta in read_safetensors_header(f).items():
                self._meta[name], self._file_of[name] = meta, f
        if index_map is not None:
            missing = sorted(set(index_map) - set(self._meta))
            if missing:
                raise EagleTrtError(f"{path / ST_INDEX} lists {len(missing)} tensor(s) not found in their shards, "
                                    f"e.g. {missing[0]!r} in {index_map[missing[0]]}",
                                    "the index and the shards disagree; re-download the checkpoint")
        self._handles: dict[Path, object] = {}

    def get(self, name: str):
        from safetensors import safe_open

        f = self._file_of[self._check(name)]
        if f not in self._handles:
            self._handles[f] = safe_open(str(f), framework="pt")
        return self._handles[f].get_tensor(name)

    def close(self) -> None:
        self._handles.clear()


class BinReader(WeightReader):
    """pytorch_model*.bin through torch.load(weights_only=True): a pickle that carries code is refused, never run."""

    def __init__(self, path: Path, files: list[Path]):
        super().__init__(path, "bin")
        self._tensors: dict[str, object] = {}
        for f in files:
            state = _load_bin(f)
            for name, tensor in state.items():
                self._tensors[name] = tensor
                self._meta[name] = (tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."))

    def get(self, name: str):
        return self._tensors[self._check(name)]

    def close(self) -> None:
        self._tensors.clear()


def _load_bin(f: Path) -> dict:
    import pickle

    import torch

    try:
        state = torch.load(f, map_location="cpu", weights_only=True, mmap=True)
    except PermissionError:
        raise EagleTrtError(f"cannot read {f}: permission denied", "fix the file permissions (chmod +r)") from None
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EagleTrtError(f"refused to load {f}: it is not a plain tensor checkpoint ({first[:200]})",
                            "only state dicts of tensors are loaded (torch.load weights_only=True); convert the "
                            "file to safetensors with a trusted tool, or obtain a clean copy") from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    import torch as _torch

    if not isinstance(state, dict) or not all(isinstance(v, _torch.Tensor) for v in state.values()):
        raise EagleTrtError(f"{f} does not hold a dict of tensors", "pass a checkpoint saved from a state_dict")
    return state


def find_weight_files(path: str | Path) -> tuple[str, list[Path], dict[str, str] | None]:
    """(format, files, index weight_map or None) for a checkpoint directory; EagleTrtError when there are none."""
    path = Path(path)
    if not path.exists():
        raise EagleTrtError(f"{path} does not exist", "pass the directory of a Hugging Face checkpoint")
    if not path.is_dir():
        raise EagleTrtError(f"{path} is a file, not a checkpoint directory",
                            "pass the directory that holds config.json and the weights")
    for index_name, fmt in ((ST_INDEX, "safetensors"), (BIN_INDEX, "bin")):
        index = path / index_name
        if index.exists():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                assert isinstance(weight_map, dict)
            except (json.JSONDecodeError, KeyError, AssertionError, TypeError):
                raise EagleTrtError(f"{index} is not a valid weight index (needs a 'weight_map' object)",
                                    "re-download the checkpoint's index file") from None
            files = sorted({path / v for v in weight_map.values()})
            for f in files:
                if not f.exists():
                    raise EagleTrtError(f"{index} points to a missing shard {f.name}",
                                        "download every shard listed in the index into the same directory")
            return fmt, files, weight_map
    single = sorted(path.glob("*.safetensors"))
    if single:
        return "safetensors", single, None
    bins = sorted(path.glob("pytorch_model*.bin"))
    if bins:
        return "bin", bins, None
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return "gguf", ggufs, None
    if len(ggufs) > 1:
        raise EagleTrtError(f"{path} holds {len(ggufs)} GGUF files", "keep exactly one .gguf file in the directory")
    raise EagleTrtError(f"no weights in {path}: expected model.safetensors, a sharded safetensors index, "
                        "pytorch_model*.bin or one .gguf file", "pass the directory that holds the model weights")


def open_weights(path: str | Path) -> WeightReader:
    """Open a checkpoint directory's weights (see the module docstring for the formats)."""
    path = Path(path)
    fmt, files, weight_map = find_weight_files(path)
    if fmt == "safetensors":
        return SafetensorsReader(path, files, weight_map)
    if fmt == "bin":
        return BinReader(path, files)
    from eagle_trt.checkpoints.gguf_reader import GGUFWeightReader

    return GGUFWeightReader(path, files[0])

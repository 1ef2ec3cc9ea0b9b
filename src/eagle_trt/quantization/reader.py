"""A quantized checkpoint seen as the plain one it stands for, and its tensors accounted for.

`DequantizedWeights` wraps a checkpoint's WeightReader: every quantized linear shows as `MODULE.weight`, float32
[out, in], dequantized exactly on `get` (quantization.formats); every other tensor passes through; scale tensors
are not shown. The runtime loads a quantized base through it, so nothing after loading knows how the base was
stored. `account` checks each stored tensor against what the quantization says a module carries (names, shapes,
dtypes) and returns the names it read, so the shape check can refuse anything left over, as it does for weights.
"""

from __future__ import annotations

import torch

from eagle_trt.checkpoints.weight_reader import WeightReader
from eagle_trt.quantization.scheme import Quantization
from eagle_trt.quantization.dequantize import dequantize
from eagle_trt.quantization.formats import WeightFormat, expected_tensors

# the tensor naming each module's weight, per layout (what tells a module is stored in that layout)
MAIN_TENSOR = {"ct-packed": "weight_packed", "awq-gemm": "qweight", "gptq": "qweight"}


def _main(fmt: WeightFormat) -> str:
    if fmt.layout == "nvfp4" and fmt.global_scale == "divide":
        return "weight_packed"
    return MAIN_TENSOR.get(fmt.layout, "weight")


def stored_size(fmt: WeightFormat, raw: WeightReader, module: str) -> tuple[int, int]:
    """(out, in) of a module's weight from its stored tensors."""
    shape = raw.shape(f"{module}.{_main(fmt)}")
    if fmt.layout in ("fp8", "int8"):
        return shape[0], shape[1]
    if fmt.layout == "ct-packed":
        size = raw.get(f"{module}.weight_shape").tolist()  # [2]: out, in
        return int(size[0]), int(size[1])
    if fmt.layout == "nvfp4":
        return shape[0], shape[1] * 2
    if fmt.layout == "modelopt-int4":
        return shape[0] * 2, shape[1]
    if fmt.layout == "awq-gemm":
        return shape[1] * 32 // fmt.bits, shape[0]
    return shape[1], shape[0] * 32 // fmt.bits  # gptq


def quantized_modules(quant: Quantization, names: set[str]) -> dict[str, WeightFormat]:
    """{module: its format} for every module stored quantized (its main tensor is in `names`)."""
    found = {}
    for name in names:
        module, _, suffix = name.rpartition(".")
        if suffix in ("weight", "weight_packed", "qweight"):
            fmt = quant.format_of(module)
            if fmt is not None and _main(fmt) == suffix:
                found[module] = fmt
    return found


class DequantizedWeights(WeightReader):
    """The checkpoint `raw` as its dequantized float32 weights (module docstring)."""

    def __init__(self, raw: WeightReader, quant: Quantization):
        super().__init__(raw.path, raw.format)
        self.raw, self.quant = raw, quant
        names = set(raw.names())
        self._modules = quantized_modules(quant, names)
        hidden = set()
        for module, fmt in self._modules.items():
            out, inp = stored_size(fmt, raw, module)
            self._meta[f"{module}.weight"] = ((out, inp), "float32")
            hidden |= {f"{module}.{suffix}" for suffix in expected_tensors(fmt, out, inp)}
        kv = quant.kv_scale_names()
        hidden |= {n for n in names if any(n.endswith("." + suffix) for suffix in kv)}
        for name in names - hidden:
            self._meta.setdefault(name, (raw.shape(name), raw.dtype(name)))

    def get(self, name: str) -> torch.Tensor:
        module = self._check(name).removesuffix(".weight")
        fmt = self._modules.get(module) if name.endswith(".weight") else None
        if fmt is None:
            return self.raw.get(name)
        out, inp = self._meta[name][0]
        return dequantize(fmt, lambda s: self.raw.get(f"{module}.{s}"), lambda s: f"{module}.{s}" in self.raw, out,
                          inp)

    def close(self) -> None:
        self.raw.close()


def account(quant: Quantization, raw: WeightReader, want: dict[str, tuple[int, ...]]) -> tuple[list[str], set[str]]:
    """Check every quantized module among `want` ({logical name: [out, in] shape}) against its stored tensors.
    Returns (problems, the stored names accounted for: each quantized module's tensors and the KV-cache scales the
    config declares)."""
    names = set(raw.names())
    problems, read = [], set()
    label = quant.label.removeprefix("a ").removeprefix("an ")
    for logical, shape in want.items():
        module = logical.removesuffix(".weight")
        fmt = quant.format_of(module) if logical.endswith(".weight") and len(shape) == 2 else None
        if fmt is None:
            continue
        if logical in names and raw.dtype(logical) not in ("float8_e4m3fn", "uint8", "int8"):
            problems.append(f"{logical} is stored unquantized ({raw.dtype(logical)}), but the quantization config "
                            f"({quant.source}) says {module} holds {fmt.describe()}")
            read.add(logical)
            continue
        for suffix, expected in expected_tensors(fmt, *shape).items():
            name = f"{module}.{suffix}"
            if name not in names:
                if expected.required:
                    problems.append(f"{label} tensor {name!r} is missing ({fmt.describe()} stores "
                                    f"{expected.describe()} there)")
                continue
            read.add(name)
            if not expected.allows(raw.shape(name), raw.dtype(name)):
                problems.append(f"{label} tensor {name!r} is {raw.dtype(name)} {list(raw.shape(name))}, expected "
                                f"{expected.describe()} for a [{shape[0]}, {shape[1]}] weight in {fmt.describe()}")
        read.add(logical)
    kv = quant.kv_scale_names()
    read |= {n for n in names if any(n.endswith("." + suffix) for suffix in kv)}
    return problems, read

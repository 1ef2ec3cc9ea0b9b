"""Write a 4-bit checkpoint of a base in AutoAWQ's GEMM layout (asymmetric) or GPTQ's (v1, sym=True), quantized by
round to nearest per input group, so that the native precisions' 4-bit block path (quantization/blocks.py) can be
measured on a real model's shapes here, where no AWQ or GPTQ checkpoint can be downloaded. Round to nearest, not
AWQ's activation-aware search or GPTQ's error feedback: what is measured is speed and EAGLE = plain, which depend
on the layout, not on how the codes were chosen. The tensors are packed by tests/quant_builders.py's
`awq_gemm_tensors` / `gptq_tensors`, the packers the tests write those layouts with (from random codes).

    python scripts/int4_checkpoint.py "$(eagle-trt demo-model --gguf-dir | tail -1)" /tmp/smollm2-awq --layout awq
    python scripts/int4_checkpoint.py "$(eagle-trt demo-model --gguf-dir | tail -1)" /tmp/smollm2-gptq --layout gptq
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from eagle_trt.checkpoints import open_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from quant_builders import LINEARS, TOKENIZER_FILES, awq_gemm_tensors, gptq_tensors  # noqa: E402

SIDE_FILES = TOKENIZER_FILES + ("chat_template.jinja",)


def round_to_nearest(w: torch.Tensor, group: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [O, I] -> codes [I, O], zero points [G, O] (0..15) and fp16 scales [G, O]: GPTQ's sym (scale 2 max|w| / 15,
    zero 8) or AWQ's asymmetric (scale (max - min) / 15 over a range that includes 0, zero round(-min / scale))."""
    out, inp = w.shape
    g = w.t().float().reshape(inp // group, group, out)  # [G, group, O]
    if sym:
        scale = (2 * g.abs().amax(1) / 15).clamp(min=1e-8)  # [G, O]
        zero = torch.full_like(scale, 8)
    else:
        low, high = g.amin(1).clamp(max=0), g.amax(1).clamp(min=0)  # [G, O]
        scale = ((high - low) / 15).clamp(min=1e-8)
        zero = torch.round(-low / scale).clamp(0, 15)
    scale = scale.half()
    codes = torch.round(g / scale.float().unsqueeze(1)) + zero.unsqueeze(1)  # [G, group, O]
    return codes.clamp(0, 15).reshape(inp, out).long(), zero.long(), scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--layout", choices=("awq", "gptq"), required=True)
    parser.add_argument("--group", type=int, default=64, help="inputs per group (a multiple of 32 dividing every "
                        "linear's inputs; SmolLM2's 576 rules out 128)")
    args = parser.parse_args()
    if args.out.exists():
        raise SystemExit(f"{args.out} exists: remove it or pick another directory")
    config = json.loads((args.base / "config.json").read_text())
    tensors = {}
    with open_weights(args.base) as reader:
        for name in reader.names():
            module = name.removesuffix(".weight")
            if not (name.endswith(".weight") and module.startswith("model.layers.")
                    and module.split(".", 3)[3] in LINEARS):
                tensors[name] = reader.get(name).contiguous()
                continue
            w = reader.get(name)  # [O, I] float32, the base's own (GGUF: dequantized)
            out, inp = w.shape
            if inp % args.group or args.group % 32:
                raise SystemExit(f"{name}: {inp} inputs do not split into groups of {args.group} (a multiple of 32)")
            codes, zero, scale = round_to_nearest(w, args.group, sym=args.layout == "gptq")
            group = torch.arange(inp) // args.group  # [I]
            tensors |= {f"{module}.{k}": v for k, v in (awq_gemm_tensors(codes, zero, scale) if args.layout == "awq"
                                                         else gptq_tensors(codes, zero, scale, group)).items()}
    quant = ({"quant_method": "awq", "bits": 4, "group_size": args.group, "zero_point": True, "version": "gemm"}
             if args.layout == "awq" else
             {"quant_method": "gptq", "bits": 4, "group_size": args.group, "desc_act": False, "sym": True,
              "checkpoint_format": "gptq"})
    partial = args.out.with_name(args.out.name + ".partial")  # renamed into place once whole
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(partial / "model.safetensors"),
              metadata={"format": "pt"})
    (partial / "config.json").write_text(json.dumps(config | {"quantization_config": quant}, indent=2))
    for side in SIDE_FILES:
        if (args.base / side).exists():
            shutil.copy(args.base / side, partial / side)
    partial.rename(args.out)
    print(f"wrote {args.out} ({args.layout}, groups of {args.group})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Conversion benchmark (not in CI): a random Llama-3-8B-shaped base + EAGLE-1 draft as sharded safetensors, converted
at tp 1 and 2; wall time against the I/O floor measured in the same run (read the inputs + write the same bytes)
and peak RSS of the converting process. Prints a table, writes JSON.

    .venv/bin/python scripts/bench_convert.py --work /tmp/convbench [--layers 32] [--eagle-layers 4]

Target: wall <= 1.5x the floor, peak RSS <= 2 GB. --layers < 32 keeps the 8B per-layer shapes with fewer layers
(less disk and time) and says so in the output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

H, I, V, HEADS, KV, D = 4096, 14336, 128256, 32, 8, 128


def make_inputs(root: Path, layers: int) -> tuple[Path, Path]:
    base, draft = root / "base", root / "draft"
    if (base / "config.json").exists() and (draft / "config.json").exists():
        return base, draft
    base.mkdir(parents=True, exist_ok=True)
    draft.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(torch.bfloat16)  # noqa: E731
    weight_map, shard, n = {}, {}, 0

    def flush():
        nonlocal shard, n
        if shard:
            name = f"model-{n:05d}.safetensors"
            save_file(shard, str(base / name), metadata={"format": "pt"})
            weight_map.update({k: name for k in shard})
            shard, n = {}, n + 1

    shard["model.embed_tokens.weight"] = rnd(V, H)
    flush()
    for i in range(layers):
        p = f"model.layers.{i}."
        shard.update({p + "self_attn.q_proj.weight": rnd(H, H), p + "self_attn.k_proj.weight": rnd(KV * D, H),
                      p + "self_attn.v_proj.weight": rnd(KV * D, H), p + "self_attn.o_proj.weight": rnd(H, H),
                      p + "mlp.gate_proj.weight": rnd(I, H), p + "mlp.up_proj.weight": rnd(I, H),
                      p + "mlp.down_proj.weight": rnd(H, I), p + "input_layernorm.weight": torch.ones(H).bfloat16(),
                      p + "post_attention_layernorm.weight": torch.ones(H).bfloat16()})
        if i % 4 == 3:
            flush()
    shard.update({"model.norm.weight": torch.ones(H).bfloat16(), "lm_head.weight": rnd(V, H)})
    flush()
    (base / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": layers, "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": D,
           "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 8192,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False}
    (base / "config.json").write_text(json.dumps(cfg))
    dsd = {"fc.weight": rnd(H, 2 * H), "layers.0.self_attn.q_proj.weight": rnd(H, H),
           "layers.0.self_attn.k_proj.weight": rnd(KV * D, H), "layers.0.self_attn.v_proj.weight": rnd(KV * D, H),
           "layers.0.self_attn.o_proj.weight": rnd(H, H), "layers.0.mlp.gate_proj.weight": rnd(I, H),
           "layers.0.mlp.up_proj.weight": rnd(I, H), "layers.0.mlp.down_proj.weight": rnd(H, I),
           "layers.0.post_attention_layernorm.weight": torch.ones(H).bfloat16()}
    save_file(dsd, str(draft / "model.safetensors"), metadata={"format": "pt"})
    (draft / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": 1, "bias": False,
                                                          "max_position_embeddings": 2048}))
    return base, draft


def io_floor(paths: list[Path], out_bytes: int, scratch: Path) -> float:
    """Seconds to read every input file and write out_bytes (same run)."""
    t0 = time.perf_counter()
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(64 << 20):
                pass
    block = os.urandom(64 << 20)
    with open(scratch, "wb") as fh:
        left = out_bytes
        while left > 0:
            fh.write(block[: min(left, len(block))])
            left -= len(block)
    scratch.unlink()
    return time.perf_counter() - t0


def convert_in_child(base: Path, draft: Path, out: Path, tp: int, nets: int) -> tuple[float, float]:
    code = ("import resource, time, sys\nfrom eagle_trt.engines.trtllm_checkpoint import convert\n"
            "from eagle_trt.build_spec import BuildSpec\n"
            f"spec = BuildSpec.create({str(base)!r}, {str(draft)!r}, engine='trtllm', tree='chain:{nets}', "
            f"tp_size={tp}, dtype='bfloat16', num_eagle_layers={nets})\n"
            f"t = time.perf_counter(); convert(spec, {str(out)!r}, force=True)\n"
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, rss_kb = res.stdout.split()
    return float(wall), int(rss_kb) / 1024 / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/eagle_trt_convbench"))
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--eagle-layers", type=int, default=4)
    ap.add_argument("--json-out", type=Path, default=Path("bench_convert.json"))
    args = ap.parse_args()
    free = shutil.disk_usage(args.work.parent if args.work.parent.exists() else Path("/")).free / 2**30
    print(f"free disk {free:.0f} GiB; generating inputs ({args.layers} layers of Llama-3-8B shape) ...", file=sys.stderr)
    base, draft = make_inputs(args.work, args.layers)
    inputs = sorted(base.glob("*.safetensors")) + [draft / "model.safetensors"]
    rows = []
    for tp in (1, 2):
        out = args.work / f"ckpt_tp{tp}"
        wall, rss = convert_in_child(base, draft, out, tp, args.eagle_layers)
        out_bytes = sum(f.stat().st_size for f in out.glob("*.safetensors"))
        floor = io_floor(inputs, out_bytes, args.work / "floor.bin")
        rows.append({"tp": tp, "wall_s": wall, "io_floor_s": floor, "ratio": wall / floor, "peak_rss_gb": rss,
                     "output_gb": out_bytes / 2**30})
        shutil.rmtree(out)
    print(f"Llama-3-8B shapes, {args.layers} layers, {args.eagle_layers} EagleNets, bf16")
    print("| tp | wall s | I/O floor s | wall/floor | peak RSS GB | output GB |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tp']} | {r['wall_s']:.1f} | {r['io_floor_s']:.1f} | {r['ratio']:.2f} | "
              f"{r['peak_rss_gb']:.2f} | {r['output_gb']:.1f} |")
    args.json_out.write_text(json.dumps({"layers": args.layers, "eagle_layers": args.eagle_layers, "rows": rows},
                                        indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

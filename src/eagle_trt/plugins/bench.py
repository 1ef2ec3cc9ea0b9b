"""Tree-attention benchmark: our Triton kernel vs SDPA with the expanded mask vs FlexAttention (block mask) vs a
plain decode step (N=1), against the HBM floor (K/V bytes / measured copy bandwidth). Table + JSON.

    python -m eagle_trt.plugins.bench --json-out bench_kernel.json        (CUDA GPU)
    python -m eagle_trt.plugins.bench --interpret-smoke                   (CPU: tiny sizes, checks the script)
"""

from __future__ import annotations

import json
import os
import sys
import time

SHAPES = {"llama3-8b": (32, 8, 128), "smollm2": (9, 3, 64)}
NS, LS, BATCHES = (8, 16, 32, 64), (512, 2048, 8192), (1, 8)


def _inputs(torch, batch, n, prefix, hq, hkv, d, dtype, device):
    from eagle_trt.tree import ancestor_mask, pack_mask
    import numpy as np

    rng = np.random.default_rng(0)
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    mask = ancestor_mask(parents)  # [n, n] bool
    packed = torch.from_numpy(np.tile(pack_mask(mask), (batch, 1))).to(device)  # [B*n, W]
    q = torch.randn(batch * n, hq, d, dtype=dtype, device=device)
    k = torch.randn(batch, hkv, prefix + n, d, dtype=dtype, device=device)
    v = torch.randn_like(k)
    cu = torch.arange(0, batch * n + 1, n, dtype=torch.int32, device=device)
    pl = torch.full((batch,), prefix, dtype=torch.int32, device=device)
    dense = torch.cat((torch.ones(n, prefix, dtype=torch.bool), torch.from_numpy(mask)), dim=1).to(device)
    return q, k, v, packed, cu, pl, dense


def _time(fn, reps: int, cuda: bool) -> float:

    fn()
    if cuda:
        from triton.testing import do_bench

        return do_bench(fn, warmup=5, rep=max(reps, 20)) * 1e3  # us
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def copy_bandwidth(torch, device) -> float:
    """Bytes/s of a large device copy (read + write counted)."""
    x = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    us = _time(lambda: y.copy_(x), 10, device == "cuda")
    return 2 * x.numel() / (us * 1e-6)


def run(smoke: bool) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not smoke:
        raise SystemExit("the kernel benchmark needs a CUDA GPU (use --interpret-smoke for a CPU check)")
    from eagle_trt.plugins.tree_attention import tree_attention

    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    shapes = SHAPES if not smoke else {"smoke": (4, 2, 32)}
    grid = [(b, n, p) for b in BATCHES for n in NS for p in LS] if not smoke else [(1, 8, 64), (2, 16, 32)]
    bw = copy_bandwidth(torch, device) if cuda else float("nan")
    flex = None
    if cuda:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention

            flex = (torch.compile(flex_attention), create_block_mask)
        except Exception:  # noqa: BLE001 - FlexAttention is optional
            flex = None
    rows = []
    for shape_name, (hq, hkv, d) in shapes.items():
        for batch, n, prefix in grid:
            q, k, v, packed, cu, pl, dense = _inputs(torch, batch, n, prefix, hq, hkv, d, dtype, device)
            reps = 3 if smoke else 50
            ours = _time(lambda: tree_attention(q, k, v, packed, cu, pl, max_tree_len=n), reps, cuda)
            qs = q.view(batch, n, hq, d).transpose(1, 2)
            sdpa = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
                qs, k, v, attn_mask=dense, enable_gqa=True), reps, cuda)
            q1 = q.view(batch, n, hq, d)[:, :1].transpose(1, 2).contiguous()
            decode = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
                q1, k, v, enable_gqa=True), reps, cuda)
            flex_us = None
            if flex is not None:
                compiled, create = flex
                tree_dense = dense

                def mask_mod(b, h, qi, kj):
                    return tree_dense[qi, kj]

                bm = create(mask_mod, None, None, n, prefix + n, device=device)
                flex_us = _time(lambda: compiled(qs, k, v, block_mask=bm, enable_gqa=True), reps, cuda)
            kv_bytes = 2 * k.numel() * k.element_size()
            floor_us = kv_bytes / bw * 1e6 if cuda else None
            rows.append({"shape": shape_name, "batch": batch, "N": n, "L": prefix, "ours_us": ours, "sdpa_us": sdpa,
                         "flex_us": flex_us, "decode_us": decode, "floor_us": floor_us,
                         "vs_floor": ours / floor_us if floor_us else None, "sdpa_over_ours": sdpa / ours})
    return {"device": torch.cuda.get_device_name() if cuda else "cpu (interpreter)", "dtype": str(dtype),
            "copy_bandwidth_GBps": bw / 1e9 if cuda else None, "rows": rows}


def table(result: dict) -> str:
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    lines = [f"device: {result['device']}, dtype {result['dtype']}",
             "| shape | B | N | L | ours us | SDPA+mask us | Flex us | decode us | floor us | ours/floor | SDPA/ours |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['shape']} | {r['batch']} | {r['N']} | {r['L']} | {fmt(r['ours_us'])} | {fmt(r['sdpa_us'])} "
                     f"| {fmt(r['flex_us'])} | {fmt(r['decode_us'])} | {fmt(r['floor_us'])} | "
                     f"{fmt(r['vs_floor']) if r['vs_floor'] else '-'} | {r['sdpa_over_ours']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interpret-smoke", action="store_true", help="tiny sizes on CPU through Triton's interpreter")
    ap.add_argument("--json-out", default="bench_kernel.json")
    args = ap.parse_args(argv)
    if args.interpret_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    result = run(args.interpret_smoke)
    print(table(result))
    with open(args.json_out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(f"json: {args.json_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

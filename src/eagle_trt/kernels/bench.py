"""Tree-attention benchmark: our Triton kernel (split over the prefix as planned, and unsplit) vs SDPA with the
expanded mask vs FlexAttention (block mask) vs a plain decode step (N=1), against the HBM floor (K/V bytes /
measured copy bandwidth). Table + JSON, each row printed and saved as it finishes; `--sweep` times a grid of launch
settings on the issue's target rows instead; `--flex` adds FlexAttention (it compiles once per shape, so only at
batch 1 and long prefixes).

    python -m eagle_trt.kernels.bench --json-out bench_kernel.json [--sweep] [--flex]   (CUDA GPU)
    python -m eagle_trt.kernels.bench --interpret-smoke                       (CPU: tiny sizes, checks the script)
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time

SHAPES = {"llama3-8b": (32, 8, 128), "smollm2": (9, 3, 64)}
NS, LS, BATCHES = (8, 16, 32, 64), (512, 2048, 4096, 8192), (1, 8)
FLEX_FROM_L = 4096  # FlexAttention recompiles for every shape: with --flex, timed at batch 1 from this L on
SWEEP_ROWS = [(1, n, p) for n in (16, 64) for p in (4096, 8192)] + [(8, 64, 8192)]  # (batch, N, L)
SWEEP = {"num_splits": ("plan", 1, 2, 4, 8, 16, 32), "block_k": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3),
         "block_q": ("plan", "double")}  # tree rows per program: LaunchPlan's, or twice that (half the row blocks)


def _inputs(torch, batch, n, prefix, hq, hkv, d, dtype, device):
    from eagle_trt.tree import ancestor_mask, pack_mask
    import numpy as np

    rng = np.random.default_rng(0)
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    mask = ancestor_mask(parents)  # [n, n] bool
    packed = torch.from_numpy(np.tile(pack_mask(mask), (batch, 1))).to(device)  # [B*n, W]
    q = torch.randn(batch * n, hq, d, dtype=dtype, device=device)  # [B*n, Hq, D]
    k = torch.randn(batch, hkv, prefix + n, d, dtype=dtype, device=device)  # [B, Hkv, L+n, D]
    v = torch.randn_like(k)
    cu = torch.arange(0, batch * n + 1, n, dtype=torch.int32, device=device)  # [B+1]
    pl = torch.full((batch,), prefix, dtype=torch.int32, device=device)  # [B]
    dense = torch.cat((torch.ones(n, prefix, dtype=torch.bool), torch.from_numpy(mask)), dim=1).to(device)
    return q, k, v, packed, cu, pl, dense


def _time(fn, reps: int, cuda: bool, rep_ms: int = 10, graph: bool = True) -> float:
    """Mean us per call. On CUDA: replayed from a CUDA graph (GPU time, as a graph-captured decoder runs it), or
    launched eagerly (graph=False: Python and launch overhead included, as an eager decoder runs it)."""
    fn()
    if cuda:
        from triton.testing import do_bench, do_bench_cudagraph

        if graph:
            return do_bench_cudagraph(fn, rep=rep_ms) * 1e3
        return do_bench(fn, warmup=5, rep=max(reps, rep_ms)) * 1e3
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def copy_bandwidth(torch, device) -> float:
    """Bytes/s of a large device copy (read + write counted)."""
    x = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    us = _time(lambda: y.copy_(x), 10, device == "cuda", graph=False)
    return 2 * x.numel() / (us * 1e-6)


def _flex(torch, device):
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        return torch.compile(flex_attention), create_block_mask
    except Exception:  # noqa: BLE001 - FlexAttention is optional
        return None


def _flex_us(torch, flex, qs, k, v, dense, n, prefix, reps, device) -> float:
    compiled, create = flex

    def mask_mod(b, h, qi, kj):
        return dense[qi, kj]

    bm = create(mask_mod, None, None, n, prefix + n, device=device)
    return _time(lambda: compiled(qs, k, v, block_mask=bm, enable_gqa=True), reps, True, graph=False)


class Progress:
    """The result so far: each finished row is printed at once and the JSON rewritten, so a run cut short by a
    time limit (a lent GPU) keeps every row it measured."""

    def __init__(self, result: dict, json_out: str | None):
        self.result, self.json_out = result, json_out

    def add(self, key: str, row: dict, line: str) -> None:
        self.result.setdefault(key, []).append(row)
        print(line, flush=True)
        if self.json_out:
            with open(self.json_out, "w") as fh:
                json.dump(self.result, fh, indent=2)


def sweep(torch, tree_attention, device, dtype, shapes, rows, reps, progress: Progress) -> None:
    """Every SWEEP setting on each row (CUDA-graph timing); 'plan' is LaunchPlan's choice."""
    from eagle_trt.kernels.tree_attention import BLOCK_K, NUM_STAGES, NUM_WARPS, LaunchPlan, multiprocessors

    for shape_name, (hq, hkv, d) in shapes.items():
        for batch, n, prefix in rows:
            q, k, v, packed, cu, pl, _ = _inputs(torch, batch, n, prefix, hq, hkv, d, dtype, device)
            timings = []
            planned_rows = LaunchPlan.of(batch, hq, hkv, prefix + n, n, BLOCK_K, multiprocessors(q.device)).block_q
            for splits, block_k, warps, stages, rows_per in itertools.product(*SWEEP.values()):
                block_q = planned_rows * (2 if rows_per == "double" else 1)
                plan = LaunchPlan.of(batch, hq, hkv, prefix + n, n, block_k, multiprocessors(q.device), block_q)
                count = plan.num_splits if splits == "plan" else splits
                kw = dict(max_tree_len=n, num_splits=count, block_k=block_k, num_warps=warps, num_stages=stages,
                          block_q=block_q)
                try:
                    us = _time(lambda: tree_attention(q, k, v, packed, cu, pl, **kw), reps, device == "cuda", 5)
                except Exception as exc:  # noqa: BLE001 - a setting the GPU cannot hold (shared memory) is recorded
                    us, kw["error"] = None, type(exc).__name__
                timings.append({"splits": splits, "rows_per": rows_per, **kw, "us": us})
            b = min((t for t in timings if t["us"]), key=lambda t: t["us"])
            p = next(t for t in timings if (t["splits"], t["rows_per"]) == ("plan", "plan")
                     and (t["block_k"], t["num_warps"], t["num_stages"]) == (BLOCK_K, NUM_WARPS, NUM_STAGES))
            line = (f"sweep {shape_name} B={batch} N={n} L={prefix}: default {p['us']:.1f} us ({p['num_splits']} "
                    f"splits); best {b['us']:.1f} us (splits {b['num_splits']}, block_k {b['block_k']}, warps "
                    f"{b['num_warps']}, stages {b['num_stages']}, block_q {b['block_q']})")
            progress.add("sweep", {"shape": shape_name, "batch": batch, "N": n, "L": prefix, "best": b,
                                   "plan_default": p, "all": timings}, line)


def compare(torch, tree_attention, device, dtype, shapes, grid, reps, flex, progress: Progress) -> None:
    """The comparison table: ours (planned and unsplit), SDPA with the mask, FlexAttention, decode, the floor."""
    from eagle_trt.kernels.tree_attention import BLOCK_K, LaunchPlan, multiprocessors

    cuda = device == "cuda"
    bw = progress.result["copy_bandwidth_GBps"]
    for shape_name, (hq, hkv, d) in shapes.items():
        for batch, n, prefix in grid:
            q, k, v, packed, cu, pl, dense = _inputs(torch, batch, n, prefix, hq, hkv, d, dtype, device)
            plan = LaunchPlan.of(batch, hq, hkv, prefix + n, n, BLOCK_K, multiprocessors(q.device))
            ours_fn = lambda: tree_attention(q, k, v, packed, cu, pl, max_tree_len=n)  # noqa: E731
            ours, ours_eager = _time(ours_fn, reps, cuda), _time(ours_fn, reps, cuda, graph=False)
            unsplit = _time(lambda: tree_attention(q, k, v, packed, cu, pl, max_tree_len=n, num_splits=1), reps, cuda)
            qs = q.view(batch, n, hq, d).transpose(1, 2)  # [B, Hq, n, D]
            sdpa = _time(lambda: torch.nn.functional.scaled_dot_product_attention(
                qs, k, v, attn_mask=dense, enable_gqa=True), reps, cuda)
            q1 = q.view(batch, n, hq, d)[:, :1].transpose(1, 2).contiguous()  # [B, Hq, 1, D]
            decode_fn = lambda: torch.nn.functional.scaled_dot_product_attention(q1, k, v, enable_gqa=True)  # noqa: E731
            decode, decode_eager = _time(decode_fn, reps, cuda), _time(decode_fn, reps, cuda, graph=False)
            flex_us = None
            if flex is not None and batch == 1 and prefix >= FLEX_FROM_L:
                flex_us = _flex_us(torch, flex, qs, k, v, dense, n, prefix, reps, device)
            kv_bytes = 2 * k.numel() * k.element_size()
            floor_us = kv_bytes / (bw * 1e9) * 1e6 if bw else None
            row = {"shape": shape_name, "batch": batch, "N": n, "L": prefix, "splits": plan.num_splits,
                   "split_len": plan.split_len, "block_q": plan.block_q, "ours_us": ours,
                   "ours_eager_us": ours_eager, "decode_eager_us": decode_eager, "unsplit_us": unsplit,
                   "sdpa_us": sdpa, "flex_us": flex_us, "decode_us": decode, "floor_us": floor_us,
                   "vs_floor": ours / floor_us if floor_us else None, "sdpa_over_ours": sdpa / ours,
                   "ours_over_decode": ours / decode}
            progress.add("rows", row, _row_line(row))


HEADER = ("| shape | B | N | L | splits | ours us | unsplit us | SDPA+mask us | Flex (eager) us | decode us | floor us "
          "| ours/floor | SDPA/ours | ours/decode | ours eager us | decode eager us |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def _row_line(r: dict) -> str:
    fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    return (f"| {r['shape']} | {r['batch']} | {r['N']} | {r['L']} | {r['splits']} | {fmt(r['ours_us'])} "
            f"| {fmt(r['unsplit_us'])} "
            f"| {fmt(r['sdpa_us'])} | {fmt(r['flex_us'])} | {fmt(r['decode_us'])} | {fmt(r['floor_us'])} "
            f"| {fmt(r['vs_floor'])} | {r['sdpa_over_ours']:.2f} | {r['ours_over_decode']:.2f} "
            f"| {fmt(r['ours_eager_us'])} | {fmt(r['decode_eager_us'])} |")


def run(smoke: bool, with_sweep: bool = False, with_flex: bool = False, json_out: str | None = None) -> dict:
    """The comparison table, or with `with_sweep` the launch-setting sweep; rows print as they finish."""
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not smoke:
        raise SystemExit("the kernel benchmark needs a CUDA GPU (use --interpret-smoke for a CPU check)")
    from eagle_trt.kernels.tree_attention import tree_attention

    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    shapes = SHAPES if not smoke else {"smoke": (4, 2, 32)}
    reps = 3 if smoke else 50
    result = {"device": torch.cuda.get_device_name() if cuda else "cpu (interpreter)", "dtype": str(dtype),
              "timing": "us per call replayed from a CUDA graph; 'eager': launched from Python",
              "copy_bandwidth_GBps": copy_bandwidth(torch, device) / 1e9 if cuda else None}
    progress = Progress(result, json_out)
    print(f"device: {result['device']}, dtype {result['dtype']}; {result['timing']}", flush=True)
    if with_sweep:
        sweep(torch, tree_attention, device, dtype, shapes, SWEEP_ROWS if not smoke else [(1, 8, 64)], reps,
              progress)
    else:
        grid = [(b, n, p) for b in BATCHES for n in NS for p in LS] if not smoke else [(1, 8, 64), (2, 16, 32)]
        print(HEADER, flush=True)
        compare(torch, tree_attention, device, dtype, shapes, grid, reps,
                _flex(torch, device) if cuda and with_flex else None, progress)
    return result


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interpret-smoke", action="store_true", help="tiny sizes on CPU through Triton's interpreter")
    ap.add_argument("--sweep", action="store_true", help="time a grid of launch settings on the target rows instead")
    ap.add_argument("--flex", action="store_true", help=f"also time FlexAttention (batch 1, L >= {FLEX_FROM_L})")
    ap.add_argument("--json-out", default="bench_kernel.json")
    args = ap.parse_args(argv)
    if args.interpret_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    run(args.interpret_smoke, args.sweep, args.flex, args.json_out)
    print(f"json: {args.json_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

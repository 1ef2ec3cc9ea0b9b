"""Int8Linear in one C call (kernels/cpu_int8.h ef_int8_linear: quantize, sum, scale) against the same arithmetic as
torch ops around the C sums, in one process: the demo base's int8 forward at --rows rows after a 128-token prefix, the
two alternating within each repeat, one thread. Prints the best time of each and whether their logits are identical
(they must be: the same float32 operations in the same order).

    .venv/bin/python scripts/int8_linear_ab.py --rows 1,4,8
"""

from __future__ import annotations

import argparse
import time

import torch

from eagle_trt.demo_model import materialize_demo_base
from eagle_trt.runtime import EagleDecoder, linears


def torch_ops_forward(self: linears.Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """Int8Linear.forward as torch ops around the C sums (the path of a weight on `_int_mm` or oneDNN)."""
    x = x.float()
    row_scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(1e-12) / linears.INT8_MAX  # [T, 1]
    xq = torch.round(x / row_scale).to(torch.int8)  # [T, K]
    out = self._int32(xq).mul_(row_scale).mul_(self.scale)  # [T, N]
    return out if self.bias is None else out.add_(self.bias)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,4,8")
    ap.add_argument("--repeats", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = EagleDecoder.load(materialize_demo_base(), None, tree="chain:1", dtype="int8").base
    one_call = linears.Int8Linear.forward
    ctx, gen = 128, torch.Generator().manual_seed(0)
    with torch.inference_mode():
        base(torch.randint(0, base.args.vocab_size, (ctx,), generator=gen), torch.arange(ctx), 0)
        for t in (int(r) for r in args.rows.split(",")):
            ids = torch.randint(0, base.args.vocab_size, (t,), generator=gen)  # [T]
            mask = torch.ones(t, t, dtype=torch.bool).tril() if t > 1 else None  # [T, T]
            best, logits = {}, {}
            for _ in range(args.repeats):
                for name, forward in (("one C call", one_call), ("torch ops", torch_ops_forward)):
                    linears.Int8Linear.forward = forward
                    t0 = time.perf_counter()
                    for _ in range(5):
                        logits[name] = base(ids, torch.arange(ctx, ctx + t), ctx, tree_mask=mask)[0]
                    best[name] = min(best.get(name, float("inf")), (time.perf_counter() - t0) / 5)
            linears.Int8Linear.forward = one_call
            same = torch.equal(logits["one C call"], logits["torch ops"])
            print(f"rows {t}: one C call {best['one C call'] * 1e3:.2f} ms, torch ops {best['torch ops'] * 1e3:.2f} ms, "
                  f"{best['one C call'] / best['torch ops']:.3f}x; identical logits: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()

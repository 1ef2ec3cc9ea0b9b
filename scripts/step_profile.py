"""Where a plain decode step and an EAGLE verify step spend their time: torch.profiler over real steps of the
SmolLM2 engine (the demo's base and EAGLE-1 draft; --dtype native runs the base's GGUF blocks through the fused C
forward, which shows as one op), grouped by op. Prints, per step kind, the wall time per step
and the ops that take the most of it (self CPU time), with how many times each runs per step; writes the tables and
the JSON summary to OUT.

    .venv/bin/python scripts/step_profile.py --dtype int8 --tree chain:3 -o docs/results/DATE/step_profile
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from eagle_trt.datasets import encode_prompt, mtbench_prompts
from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir
from eagle_trt.runtime import EagleDecoder
from eagle_trt.spec import NATIVE_PRECISIONS

ROWS = 25  # ops listed per step kind


def measure(decoder: EagleDecoder, prompts: list[list[int]], max_tokens: int) -> tuple[float, int, object]:
    """(seconds in generation after prefill, verify steps, the profiler) over `prompts`."""
    steps, seconds = 0, 0.0
    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        for ids in prompts:
            t0 = time.perf_counter()
            result = decoder.generate_all(ids, max_tokens)
            seconds += time.perf_counter() - t0 - result.stats.prefill_time_s
            steps += len(result.stats.accepted_lengths)
    return seconds, steps, prof


def table(prof, steps: int) -> tuple[str, list[dict]]:
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in events)
    rows = [{"op": e.key, "calls_per_step": e.count / steps, "ms_per_step": e.self_cpu_time_total / 1000 / steps,
             "share": e.self_cpu_time_total / total} for e in events[:ROWS]]
    lines = ["| op | calls per step | self ms per step | share of self time |", "|---|---|---|---|"]
    lines += [f"| {r['op']} | {r['calls_per_step']:.1f} | {r['ms_per_step']:.3f} | {100 * r['share']:.1f} % |"
              for r in rows]
    return "\n".join(lines), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--tree", default="chain:3", help="the verify step's tree")
    ap.add_argument("--prompts", type=int, default=4, help="MT-bench first turns")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-o", "--out", type=Path, required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    base = materialize_demo_gguf_base() if args.dtype in NATIVE_PRECISIONS else materialize_demo_base()  # native: Q4_1 as stored
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    prompts = [encode_prompt(tok, p.text, True) for p in mtbench_prompts()[:args.prompts]]
    eagle = EagleDecoder.load(base, shipped_draft_dir("eagle1"), tree=args.tree, dtype=args.dtype)
    kinds = {"plain decode step": eagle.with_tree("chain:1", speculative=False), f"verify step ({args.tree})": eagle}
    for decoder in kinds.values():
        decoder.generate_all(prompts[0], 8)  # warm-up
    args.out.mkdir(parents=True, exist_ok=True)
    summary, report = {}, []
    for kind, decoder in kinds.items():
        seconds, steps, prof = measure(decoder, prompts, args.max_tokens)
        text, rows = table(prof, steps)
        summary[kind] = {"ms_per_step": 1000 * seconds / steps, "steps": steps, "ops": rows}
        report += [f"## {kind}: {1000 * seconds / steps:.2f} ms per step ({steps} steps, profiler on)", "", text, ""]
    header = (f"SmolLM2-135M + EAGLE-1 draft, {args.dtype}, {args.threads} threads, {args.prompts} MT-bench first "
              f"turns x {args.max_tokens} tokens")
    (args.out / "step_profile.md").write_text(f"# Step profile\n\n{header}\n\n" + "\n".join(report))
    (args.out / "step_profile.json").write_text(json.dumps({"settings": vars(args) | {"out": str(args.out)},
                                                            "steps": summary}, indent=2))
    print(header)
    print("\n".join(report))


if __name__ == "__main__":
    main()

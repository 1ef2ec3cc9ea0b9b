"""How closely the int8 engine (runtime/linears.py) follows fp32: plain greedy decoding of both on MT-bench first turns,
per prompt the tokens that agree before the first difference; prints a summary and writes JSON.

    .venv/bin/python scripts/int8_agreement.py --max-tokens 64 --out docs/results/2026-11-23-int8/cpu_int8_vs_fp32.json
"""

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer

from eagle_trt.demo_model import materialize_demo_base
from eagle_trt.datasets import encode_prompt, load_dataset
from eagle_trt.runtime import EagleDecoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mt-bench")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    base = materialize_demo_base()
    tok = AutoTokenizer.from_pretrained(base)
    engines = {dt: EagleDecoder.load(base, None, tree="chain:1", dtype=dt) for dt in ("float32", "int8")}
    stop = engines["float32"].base_spec.eos_token_ids
    rows = []
    for p in load_dataset(args.dataset):
        ids = encode_prompt(tok, p.text, chat=True)
        out = {dt: e.generate_all(ids, args.max_tokens, stop_token_ids=stop).token_ids for dt, e in engines.items()}
        a, b = out["float32"], out["int8"]
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        rows.append({"id": p.id, "identical": a == b, "agreeing_prefix": same, "fp32_tokens": len(a)})
    n = len(rows)
    summary = {"prompts": n, "identical": sum(r["identical"] for r in rows),
               "first_token_agrees": sum(r["agreeing_prefix"] > 0 for r in rows),
               "mean_agreeing_prefix": sum(r["agreeing_prefix"] for r in rows) / n,
               "agreeing_token_fraction": sum(r["agreeing_prefix"] for r in rows) / sum(r["fp32_tokens"] for r in rows),
               "max_tokens": args.max_tokens, "dataset": args.dataset}
    args.out.write_text(json.dumps({"summary": summary, "prompts": rows}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

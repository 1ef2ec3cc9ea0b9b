"""How closely the fp32 engine (oneDNN-packed linears, runtime/linears.py) follows Hugging Face transformers: plain greedy
decoding of both on MT-bench first turns, per prompt the tokens that agree before the first difference; prints a
summary and writes JSON. (scripts/int8_agreement.py does the same for int8 against our fp32.)

    .venv/bin/python scripts/hf_agreement.py --max-tokens 64 --out docs/results/2026-11-24-packed/cpu_fp32_vs_hf.json
"""

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from eagle_trt.demo_model import materialize_demo_base
from eagle_trt.datasets import encode_prompt, load_dataset
from eagle_trt.runtime import EagleDecoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="mt-bench")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=0, help="the first N prompts (0: all)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    base = materialize_demo_base()
    tok = AutoTokenizer.from_pretrained(base)
    ours = EagleDecoder.load(base, None, tree="chain:1", dtype="float32")
    hf = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    stop = ours.base_spec.eos_token_ids
    rows = []
    prompts = load_dataset(args.dataset)
    for p in prompts[: args.prompts] if args.prompts else prompts:
        ids = encode_prompt(tok, p.text, chat=True)
        a = ours.generate_all(ids, args.max_tokens, stop_token_ids=stop).token_ids
        with torch.inference_mode():
            full = hf.generate(torch.tensor([ids]), max_new_tokens=args.max_tokens, do_sample=False,
                               eos_token_id=list(stop), pad_token_id=stop[0])[0, len(ids):].tolist()  # [<= max_tokens]
        same = next((i for i, (x, y) in enumerate(zip(a, full)) if x != y), min(len(a), len(full)))
        rows.append({"id": p.id, "identical": a == full, "agreeing_prefix": same, "hf_tokens": len(full)})
    n = len(rows)
    summary = {"prompts": n, "identical": sum(r["identical"] for r in rows),
               "mean_agreeing_prefix": sum(r["agreeing_prefix"] for r in rows) / n,
               "agreeing_token_fraction": sum(r["agreeing_prefix"] for r in rows) / sum(r["hf_tokens"] for r in rows),
               "max_tokens": args.max_tokens, "dataset": args.dataset, "linears": type(ours.base.lm_head).__name__}
    args.out.write_text(json.dumps({"summary": summary, "prompts": rows}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()

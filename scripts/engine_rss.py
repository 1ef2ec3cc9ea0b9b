"""Peak resident memory of the PyTorch engine as a served model holds it: in this (fresh) process, load the demo
base and the shipped EAGLE-1 draft at --dtype (native and native-q8 read the base's GGUF blocks; the others its float32 HF
copy), run one MT-bench prompt, and print the RSS after loading, the peak RSS (ru_maxrss, load included) and the
tokens generated, as one JSON line.

    .venv/bin/python scripts/engine_rss.py --dtype int8
    .venv/bin/python scripts/engine_rss.py --dtype native
"""

from __future__ import annotations

import argparse
import json
import resource
from pathlib import Path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="int8")
    ap.add_argument("--tree", default="chain:2+suffix:4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    from eagle_trt.datasets import encode_prompt, mtbench_prompts
    from eagle_trt.demo_model import materialize_demo_base, materialize_demo_gguf_base, shipped_draft_dir
    from eagle_trt.runtime import EagleDecoder
    from eagle_trt.spec import NATIVE_PRECISIONS

    torch.set_num_threads(2)
    base = materialize_demo_gguf_base() if args.dtype in NATIVE_PRECISIONS else materialize_demo_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir("eagle1"), tree=args.tree, dtype=args.dtype)
    loaded = rss_mib()
    ids = encode_prompt(AutoTokenizer.from_pretrained(base), mtbench_prompts()[0].text, True)
    tokens = decoder.generate_all(ids, args.max_tokens).token_ids
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"dtype": args.dtype, "base": str(base), "rss_after_load_mib": round(loaded, 1),
                      "peak_rss_mib": round(peak, 1), "rss_now_mib": round(rss_mib(), 1), "tokens": len(tokens)}))


if __name__ == "__main__":
    main()

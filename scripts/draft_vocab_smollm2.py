"""Write draft_vocab.json for the shipped SmolLM2 EAGLE-1 draft (FR-Spec's truncated draft vocabulary).

The set: the 8192 token ids the EAGLE-1 draft's CE was trained over, i.e. the most frequent tokens of its training
data (the base's answers to the ShareGPT first turns), which the shipped EAGLE-3 draft records as its vocabulary
(d2t: both runs used the same data and the same top-8192 rule). The order: frequency of each id in the ShareGPT
first turns tokenized by the base's tokenizer (ties: lower id first), so `--draft-vocab N` keeps the N most frequent.

Prints the file written and its number of ids.

    .venv/bin/python scripts/draft_vocab_smollm2.py --prompts ../shared/data/sharegpt_prompts.jsonl
"""

import argparse
import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
from eagle_trt.runtime.loading import DRAFT_VOCAB_FILE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=Path, required=True, help="ShareGPT first turns (JSONL with a 'prompt' field)")
    args = ap.parse_args()
    d2t = load_file(str(shipped_draft_dir("eagle3") / "model.safetensors"))["d2t"]
    used = d2t + torch.arange(d2t.numel())  # [8192] base ids
    tok = AutoTokenizer.from_pretrained(materialize_demo_base())
    counts = torch.zeros(tok.vocab_size if tok.vocab_size >= int(used.max()) + 1 else int(used.max()) + 1,
                         dtype=torch.float64)
    for line in filter(None, args.prompts.read_text(encoding="utf-8").split("\n")):
        ids = tok(json.loads(line)["prompt"], add_special_tokens=False)["input_ids"]
        ids = torch.tensor(ids, dtype=torch.long)  # [n]
        counts += torch.bincount(ids, minlength=counts.numel()).double()[: counts.numel()]
    score = counts[used] - used.double() * 1e-9  # ties: lower id first
    ordered = used[score.argsort(descending=True)].tolist()
    out = shipped_draft_dir("eagle1") / DRAFT_VOCAB_FILE
    out.write_text(json.dumps({"token_ids": ordered, "source": "the 8192 most frequent tokens of the draft's "
                               "training data (its CE vocabulary), ordered by frequency in the ShareGPT first turns; "
                               "scripts/draft_vocab_smollm2.py"}) + "\n", encoding="utf-8")
    print(f"{out}: {len(ordered)} ids")


if __name__ == "__main__":
    main()

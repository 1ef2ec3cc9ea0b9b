"""What pruning low-confidence draft tokens would save and cost at chain:2 (SmolLM2 + the shipped EAGLE-1 draft, int8).

For each verify step: the draft's probability of its depth-1 token and of the path to depth 2, against what the base
accepted. For thresholds on the path probability it prints the share of draft rows a pruned chain would keep and the
share of accepted draft tokens it would keep (the mean accepted length if pruned). Read-only: it wraps the drafting
generator; the runtime is unchanged.

    .venv/bin/python docs/results/2026-11-26-load-analysis/draft_confidence.py mt-bench 40     # dataset (mt-bench, calibration, ...), prompts
"""

import sys

import torch

THRESHOLDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


def main() -> None:
    from transformers import AutoTokenizer

    import eagle_trt.runtime.decoder as decoder_mod
    import eagle_trt.runtime.drafting as drafting
    from eagle_trt.datasets import encode_prompt, load_dataset
    from eagle_trt.demo_model import materialize_demo_base, shipped_draft_dir
    from eagle_trt.runtime import EagleDecoder

    torch.set_num_threads(2)
    seen = []  # (p1, p2) per drafted chain: depth 1's draft probability, depth 2's given depth 1
    original = drafting.static_tree

    def recorded(plan, root, root_draft, stable, cache):
        p1 = float(root_draft.scores[0, 0].exp())
        steps = original(plan, root, root_draft, stable, cache)
        call = next(steps)
        while True:
            answer = yield call
            p2 = float(answer.scores[0, 0].exp())
            try:
                call = steps.send(answer)
            except StopIteration as stop:
                seen.append((p1, p2))
                return stop.value

    for module in (drafting, decoder_mod):
        if hasattr(module, "static_tree"):
            module.static_tree = recorded
    base = materialize_demo_base()
    decoder = EagleDecoder.load(base, shipped_draft_dir(), tree="chain:2", dtype="int8", max_seq_len=2048)
    tok = AutoTokenizer.from_pretrained(str(base))
    rows = []
    for prompt in load_dataset(sys.argv[1])[: int(sys.argv[2])]:
        seen.clear()
        result = decoder.generate_all(encode_prompt(tok, prompt.text, True), 64,
                                     stop_token_ids=decoder.base_spec.eos_token_ids)
        accepted = result.stats.accepted_lengths
        assert len(accepted) == len(seen), (len(accepted), len(seen))
        rows += [(p1, p2, a) for (p1, p2), a in zip(seen, accepted)]
    n = len(rows)
    print(f"{n} steps, mean accepted length {sum(a for *_, a in rows) / n:.3f}")
    print("| threshold | draft rows kept | accepted drafts kept | mean accepted length if pruned |")
    print("|---|---|---|---|")
    for t in THRESHOLDS:
        kept = kept_accepted = all_accepted = 0
        for p1, p2, a in rows:
            keep1 = p1 >= t
            keep2 = keep1 and p1 * p2 >= t  # the path's probability
            all_accepted += a - 1
            kept += keep1 + keep2
            kept_accepted += (a >= 2 and keep1) + (a >= 3 and keep2)
        print(f"| {t} | {kept / (2 * n):.3f} | {kept_accepted / max(all_accepted, 1):.3f} | "
              f"{1 + kept_accepted / n:.3f} |")


if __name__ == "__main__":
    main()

"""Runtime benchmark: plain vs EAGLE decoding with the PyTorch runtime on a prompt set (greedy), per tree setting:
tok/s, speedup, mean accepted length, acceptance rate, draft/verify time split. Prints a table, writes JSON.

    python -m eagle_trt.perf.bench_runtime --base B --draft D --trees chain:3,dynamic:4,4,12 --prompts 10
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class BenchConfig:
    base: Path
    draft: Path | None
    trees: tuple[str, ...] = ("chain:3", "dynamic:4,4,12")
    dataset: str = "mt-bench"
    prompts: int = 10
    max_tokens: int = 64
    device: str = "cpu"
    dtype: str = "float32"
    chat: bool = True


def _encode_all(cfg: BenchConfig) -> list[list[int]]:
    from transformers import AutoTokenizer

    from eagle_trt.commands.generate import encode_prompt
    from eagle_trt.perf.datasets import load_dataset

    tok = AutoTokenizer.from_pretrained(cfg.base)
    return [encode_prompt(tok, p.text, cfg.chat) for p in load_dataset(cfg.dataset)[: cfg.prompts]]


def _measure(engine, prompts, max_tokens, stop) -> dict:
    engine.generate_all(prompts[0], 8, stop_token_ids=stop)  # warm-up
    tokens, seconds, lengths, drafted, accepted, draft_s, verify_s, outputs = 0, 0.0, [], 0, 0, 0.0, 0.0, []
    for ids in prompts:
        t0 = time.perf_counter()
        res = engine.generate_all(ids, max_tokens, stop_token_ids=stop)
        seconds += time.perf_counter() - t0
        tokens += len(res.token_ids)
        lengths += res.stats.accepted_lengths
        drafted += res.stats.num_draft_tokens
        accepted += res.stats.num_accepted_draft_tokens
        draft_s += res.stats.draft_time_s
        verify_s += res.stats.verify_time_s
        outputs.append(res.token_ids)
    return {"tokens": tokens, "seconds": seconds, "tok_per_s": tokens / seconds,
            "mean_accepted_length": sum(lengths) / max(len(lengths), 1),
            "acceptance_rate": accepted / drafted if drafted else 0.0, "draft_s": draft_s, "verify_s": verify_s,
            "outputs": outputs}


def run_bench(cfg: BenchConfig, echo=print) -> dict:
    from eagle_trt.runtime import EagleEngine

    prompts = _encode_all(cfg)
    plain = EagleEngine.load(cfg.base, None, tree="chain:1", device=cfg.device, dtype=cfg.dtype)
    stop = plain.base_spec.eos_token_ids
    echo(f"plain decoding: {len(prompts)} prompts x {cfg.max_tokens} tokens ...")
    rows = {"plain": _measure(plain, prompts, cfg.max_tokens, stop)}
    del plain
    for tree in cfg.trees:
        echo(f"EAGLE {tree} ...")
        engine = EagleEngine.load(cfg.base, cfg.draft, tree=tree, device=cfg.device, dtype=cfg.dtype)
        rows[tree] = _measure(engine, prompts, cfg.max_tokens, stop)
        del engine
    base_tps = rows["plain"]["tok_per_s"]
    reference = rows["plain"]["outputs"]
    for row in rows.values():
        row["speedup"] = row["tok_per_s"] / base_tps
        row["identical_to_plain"] = row.pop("outputs") == reference
    return {"config": {k: str(v) for k, v in cfg.__dict__.items()}, "rows": rows,
            "machine": {"platform": platform.platform(), "threads": torch.get_num_threads()}}


def format_table(result: dict) -> str:
    lines = ["| setting | tok/s | speedup | mean accepted length | acceptance rate | draft s | verify s | identical |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in result["rows"].items():
        lines.append(f"| {name} | {r['tok_per_s']:.1f} | {r['speedup']:.2f}x | {r['mean_accepted_length']:.2f} | "
                     f"{r['acceptance_rate']:.3f} | {r['draft_s']:.1f} | {r['verify_s']:.1f} | "
                     f"{'yes' if r['identical_to_plain'] else 'NO'} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    from eagle_trt.commands.bench import bench_cmd

    bench_cmd.main(args=argv, standalone_mode=True)


if __name__ == "__main__":
    main()

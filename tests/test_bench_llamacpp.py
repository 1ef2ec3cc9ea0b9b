"""`eagle-trt bench` against llama.cpp and over context lengths: the llama.cpp row's ratios, its refusals before any
work, prompts of a given length from held-out text, and `--contexts` end to end on the tiny model. (llama.cpp itself
is built outside CI, `make llamacpp`; its row's figures are in docs/performance.md.)"""

import importlib.util
import json

import pytest
from click.testing import CliRunner
from transformers import AutoTokenizer

from eagle_trt.cli import main
from eagle_trt.perf import bench_runtime as B


def _row(tokens: int, seconds: float, prefill: float, outputs: list) -> dict:
    row = B._empty_row()
    row.update(tokens=tokens, seconds=seconds, prefill_s=prefill, outputs=outputs)
    return row


def test_every_row_gets_its_ratio_to_llamacpp():
    rows = {"plain": _row(100, 4.0, 1.0, [[1, 2]]), "chain:3": _row(100, 2.0, 0.5, [[1, 2]]),
            B.LLAMACPP_ROW: _row(100, 1.0, 0.5, [[1, 3]])}
    out = B._summarise(rows)
    assert out["plain"]["vs_llamacpp"] == pytest.approx(0.25) and out["chain:3"]["vs_llamacpp"] == pytest.approx(0.5)
    assert out["plain"]["decode_vs_llamacpp"] == pytest.approx((100 / 3.0) / (100 / 0.5))
    assert out[B.LLAMACPP_ROW]["identical_prompts"] == 0 and out["chain:3"]["identical_to_plain"]
    table = B.format_table({"rows": out, "prompts_total": 1})
    assert "vs llama.cpp (decode)" in table and "- (0/1 equal to ours)" in table  # not flagged as a failure
    assert "| chain:3 | 50.0 | 66.7 |" in table and "0.50x (0.33x) |" in table


def test_llamacpp_is_refused_before_any_work(tiny_base, tmp_path, monkeypatch):
    args = ["bench", "--base", str(tiny_base), "--prompts", "1", "--max-tokens", "2", "--trees", "chain:1",
            "--json-out", str(tmp_path / "b.json")]
    res = CliRunner().invoke(main, args + ["--llamacpp", str(tmp_path / "missing.gguf")])
    assert res.exit_code == 1 and "not a .gguf file" in res.output and "demo-model --gguf" in res.output
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    res = CliRunner().invoke(main, args + ["--llamacpp", str(gguf)])
    assert res.exit_code == 1 and "llama-cpp-python, which is not installed" in res.output
    assert "make llamacpp" in res.output and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("tokens", [64, 300])
def test_context_prompts_have_about_the_asked_length(tiny_base, tokens):
    from eagle_trt.datasets import encode_prompt

    tok = AutoTokenizer.from_pretrained(tiny_base)
    prompts = B.context_prompts(tok, tokens, 3, chat=True)
    lengths = [len(encode_prompt(tok, p.text, True)) for p in prompts]
    assert all(abs(n - tokens) <= max(4, tokens // 20) for n in lengths), lengths
    assert len({p.text for p in prompts}) == 3 and all(p.category == f"context {tokens}" for p in prompts)


def test_bench_contexts_prints_the_cost_growth_table(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--draft", str(eagle1_draft), "--contexts",
                                    "64,200", "--prompts", "1", "--max-tokens", "4", "--trees", "chain:2",
                                    "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())["contexts"]
    assert list(result) == ["64", "200"]
    for n, run in result.items():
        assert set(run["rows"]) == {"plain", "chain:2"} and run["rows"]["chain:2"]["identical_to_plain"]
        assert f"| ~{n} | chain:2 |" in res.output
    bad = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--contexts", "big"])
    assert bad.exit_code == 2 and "128,1024,4096" in bad.output


def test_bench_backoff_and_another_precision_rows(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--draft", str(eagle1_draft), "--prompts", "2",
                                    "--max-tokens", "12", "--trees", "chain:3", "--backoff", "--also-plain", "int8",
                                    "--turns", "first", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert list(rows) == ["plain", "chain:3", "chain:3 +backoff", "plain int8"]
    assert rows["chain:3 +backoff"]["identical_to_plain"] and rows["chain:3"]["identical_to_plain"]
    assert rows["chain:3 +backoff"]["steps"] > 0 and rows["chain:3"]["plain_steps"] == 0
    assert "plain int8 |" in res.output and "equal to ours" in res.output  # other numerics: compared, not required


def test_bench_reuse_prefix_prefills_only_what_a_next_turn_adds(tiny_base, eagle1_draft, tmp_path):
    """Each row (the +backoff row too, which shares its model with the row before) finds its own first turn held:
    second turns prefill only what they add, and every output still equals plain decoding's, as without reuse."""
    runs = {}
    for flag in ([], ["--reuse-prefix"]):
        out = tmp_path / f"b{len(flag)}.json"
        res = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--draft", str(eagle1_draft), "--prompts",
                                        "2", "--max-tokens", "10", "--trees", "chain:3", "--backoff", "--dtype", "int8",
                                        "--turns", "both", "--json-out", str(out)] + flag)
        assert res.exit_code == 0, res.output
        runs[bool(flag)] = (json.loads(out.read_text())["rows"], res.output)
    rows, output = runs[True]
    assert list(rows) == ["plain", "chain:3", "chain:3 +backoff"]
    assert all(r["identical_to_plain"] for r in rows.values())
    cached = {name: r["cached_prompt_tokens"] for name, r in rows.items()}
    assert min(cached.values()) > 0 and len(set(cached.values())) == 1, cached  # the same held prefix on every row
    assert "prompt tokens not prefilled" in output and f"chain:3 +backoff {cached['plain']}" in output
    without, output = runs[False]
    assert all(r["cached_prompt_tokens"] == 0 for r in without.values()) and "not prefilled" not in output
    assert [r["tokens"] for r in without.values()] == [r["tokens"] for r in rows.values()]


def _die_at_start(pipe, *args) -> None:
    """A llama.cpp child that dies before it answers (spawned: imported from this module by name)."""
    import os

    os._exit(3)


def test_a_child_that_dies_at_start_is_reported_at_once(tmp_path, monkeypatch):
    """The parent closes its copy of the child's pipe end, so a dead child reads as EOF: a clear error within
    seconds, not the 600 s answer timeout."""
    import time

    from eagle_trt.errors import EagleTrtError
    from eagle_trt.perf import llamacpp

    monkeypatch.setattr(llamacpp, "check_llamacpp", lambda gguf: tmp_path / "model.gguf")
    monkeypatch.setattr(llamacpp, "_serve", _die_at_start)
    t0 = time.perf_counter()
    with pytest.raises(EagleTrtError, match=r"the llama.cpp process died \(exit code 3\)") as err:
        llamacpp.LlamaCpp(tmp_path / "model.gguf", threads=1)
    assert time.perf_counter() - t0 < 60 and "__main__" in err.value.hint

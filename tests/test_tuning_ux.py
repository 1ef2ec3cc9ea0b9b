"""Tuning never surprises: `generate` never measures (cached choice or a preset, and the `eagle-trt tune` line to
run), `eagle-trt tune` measures with progress within --tune-budget and fills the cache `generate` reads, and
`build --tree auto` refuses bad input before it tunes."""

import json

from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.tuning.calibrate import PRESET_TREES, TUNE_STAGES, DYNAMIC_GRID, TuneRequest, tune


def _cache_files(root):
    return sorted((root / "tuning").glob("*.json")) if (root / "tuning").exists() else []


def test_budget_skips_candidates_and_progress_reaches_the_end(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_TRT_CACHE", str(tmp_path))
    calls = []
    req = TuneRequest(tiny_base, eagle1_draft, dtype="int8", prompts=2, max_tokens=6, max_nodes=8, budget_s=0.0)
    result = tune(req, progress=lambda done, total, what: calls.append((done, total, what)))
    assert [c["tree"] for c in result.candidates] == [DYNAMIC_GRID[0]]  # the first dynamic tree always runs
    assert result.tree == DYNAMIC_GRID[0]
    assert set(DYNAMIC_GRID[1:]) <= set(result.skipped) and len(result.skipped) >= len(DYNAMIC_GRID)
    assert [c[0] for c in calls] == list(range(1, TUNE_STAGES + 1)) and {c[1] for c in calls} == {TUNE_STAGES}


def test_generate_never_measures_and_tune_fills_its_cache(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_TRT_CACHE", str(tmp_path))
    gen = ["generate", "--base", str(tiny_base), "--draft", str(eagle1_draft), "Hi", "--max-tokens", "6",
           "--dtype", "int8", "--json"]
    first = CliRunner().invoke(main, gen)
    assert first.exit_code == 0, first.output
    assert f"using the preset {PRESET_TREES['cpu']}" in first.stderr
    hint = first.stderr.split("cached): ")[1].strip()
    assert hint == f"eagle-trt tune --base {tiny_base} --draft {eagle1_draft} --dtype int8"
    assert _cache_files(tmp_path) == []  # nothing was measured

    tuned = CliRunner().invoke(main, hint.split()[1:] + ["--tune-budget", "10"])  # the very line it printed
    assert tuned.exit_code == 0, tuned.output
    chosen = tuned.stdout.split("chosen: ")[1].split()[0]
    assert len(_cache_files(tmp_path)) == 1 and f"cache: {_cache_files(tmp_path)[0]}" in tuned.stdout

    again = CliRunner().invoke(main, gen)
    assert again.exit_code == 0 and f"--tree auto: {chosen} (tuned on this machine" in again.stderr
    assert json.loads(again.stdout)["token_ids"] == json.loads(first.stdout)["token_ids"]  # greedy: same tokens
    assert len(_cache_files(tmp_path)) == 1


def test_build_refuses_an_existing_out_before_tuning(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_TRT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bundle"
    out.mkdir()
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                    "--engine", "pytorch", "--tree", "auto"])
    assert res.exit_code == 1 and "already exists" in res.stderr and "--force" in res.stderr
    assert _cache_files(tmp_path / "cache") == []  # refused before any measuring

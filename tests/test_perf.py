"""Perf harness: dataset conversion (real MT-bench / HumanEval files), the harness files written into bundles, and
a real AIPerf run against a real tritonserver on the tiny model, with the report and `perf compare` built from the
export files it produced."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.perf import datasets
from eagle_trt.perf.harness_files import aiperf_command, genai_perf_command

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
AIPERF = Path(__file__).resolve().parents[1] / ".venv-aiperf" / "bin" / "aiperf"


def test_mtbench_from_the_shared_and_packaged_files():
    packaged = datasets.mtbench_prompts()
    assert len(packaged) == 80 and len({p.category for p in packaged}) == 8
    assert all(len(p.turns) == 2 for p in packaged)
    if (SHARED / "mt_bench_question.jsonl").exists():
        assert datasets.mtbench_prompts(SHARED / "mt_bench_question.jsonl") == packaged


def test_humaneval_from_the_package():
    prompts = datasets.humaneval_prompts()
    assert len(prompts) == 164 and prompts[0].id == "HumanEval/0" and "def " in prompts[0].text


def test_jsonl_and_sharegpt_files(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "a"}, {"text": "b"}, {"turns": ["c", "c2"]},
        {"conversations": [{"from": "human", "value": "d"}, {"from": "gpt", "value": "x"}]},
        {"messages": [{"role": "user", "content": "e"}]}]) + "\n")
    assert [p.text for p in datasets.jsonl_prompts(f)] == ["a", "b", "c", "d", "e"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"nothing": 1}\n')
    with pytest.raises(EagleTrtError, match="has no prompt"):
        datasets.jsonl_prompts(bad)
    with pytest.raises(EagleTrtError, match="unknown dataset"):
        datasets.load_dataset("nope")


def test_input_file_writers(tmp_path):
    prompts = datasets.mtbench_prompts()[:3]
    gp = datasets.write_genai_perf_input(prompts, tmp_path / "g.jsonl").read_text().splitlines()
    ap = datasets.write_aiperf_input(prompts, tmp_path / "a.jsonl", 64).read_text().splitlines()
    assert [json.loads(x) for x in gp] == [{"text": p.text} for p in prompts]
    assert [json.loads(x) for x in ap] == [{"text": p.text, "output_length": 64} for p in prompts]


def test_commands_in_harness_files(tmp_path):
    g = genai_perf_command("eagle_model", "in.jsonl", "/tok", 128)
    assert g[:6] == ["genai-perf", "profile", "-m", "eagle_model", "--service-kind", "triton"]
    assert g[g.index("--backend") + 1] == "tensorrtllm" and g[g.index("--concurrency") + 1] == "1"
    a = aiperf_command("base_model", "in.jsonl", "/tok")
    assert a[a.index("--endpoint-type") + 1] == "triton_generate" and "--streaming" in a
    assert a[a.index("--custom-endpoint") + 1] == "/v2/models/base_model/generate_stream"


@pytest.fixture(scope="module")
def bundle(tiny_base, eagle1_draft, tmp_path_factory):
    out = tmp_path_factory.mktemp("perf") / "bundle"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o", str(out),
                                    "--engine", "pytorch", "--tree", "chain:3"])
    assert res.exit_code == 0, res.output
    return out


def test_bundle_has_the_harness_files(bundle):
    perf = bundle / "perf"
    for name in ("genai_perf.sh", "aiperf.sh", "README.md", "mt_bench.genai_perf.jsonl", "mt_bench.aiperf.jsonl",
                 "humaneval.aiperf.jsonl"):
        assert (perf / name).exists(), name
    script = (perf / "genai_perf.sh").read_text()
    assert "genai-perf profile -m eagle_model --service-kind triton --backend tensorrtllm" in script
    assert "-m base_model" in script and "--concurrency 1" in script
    assert len((perf / "mt_bench.aiperf.jsonl").read_text().splitlines()) == 80


@pytest.mark.server
@pytest.mark.skipif(not AIPERF.exists(), reason="AIPerf is installed by `make aiperf` (make test does it)")
def test_real_aiperf_run_report_and_compare(bundle, tmp_path):
    res = CliRunner().invoke(main, ["perf", "run", str(bundle), "--requests", "4", "--max-tokens", "12",
                                    "--warmup", "1", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    for key in ("speedup", "mean_accepted_length", "identical"):
        assert key in report
    assert report["identical"] is True and report["compared_requests"] == 4
    assert report["speedup"] > 0 and report["mean_accepted_length"] >= 1.0
    assert report["eagle"]["output_token_throughput"] > 0 and report["base"]["time_to_first_token_ms"] > 0
    perf = bundle / "perf"
    assert json.loads((perf / "report.json").read_text())["identical"] is True
    assert "identical outputs: **yes**" in (perf / "report.md").read_text()
    for png in ("throughput.png", "latency_distributions.png"):
        assert (perf / png).stat().st_size > 1000
    run_dir = Path(report["settings"]["run_dir"])
    out = tmp_path / "cmp"
    cmp = CliRunner().invoke(main, ["perf", "compare", str(run_dir / "eagle_model"), str(run_dir / "base_model"),
                                    "-o", str(out), "--json"])
    assert cmp.exit_code == 0, cmp.output
    again = json.loads(cmp.output[cmp.output.index("{"):])
    assert again["speedup"] == pytest.approx(report["speedup"]) and again["identical"] is True
    assert (out / "report.md").exists()


def test_compare_rejects_what_it_cannot_read(tmp_path):
    (tmp_path / "a").mkdir()
    res = CliRunner().invoke(main, ["perf", "compare", str(tmp_path / "a"), str(tmp_path / "a")])
    assert res.exit_code == 1 and "neither an AIPerf run" in res.output


def test_compare_reads_genai_perf_exports(tmp_path):
    for name, tps in (("eagle", 200.0), ("base", 100.0)):
        d = tmp_path / name
        d.mkdir()
        (d / "profile_export_genai_perf.json").write_text(json.dumps({
            "output_token_throughput": {"unit": "tokens/sec", "avg": tps},
            "time_to_first_token": {"unit": "ms", "avg": 20.0}, "request_latency": {"unit": "ms", "avg": 500.0},
            "input_config": {"model_names": [f"{name}_model"]}}))
    res = CliRunner().invoke(main, ["perf", "compare", str(tmp_path / "eagle"), str(tmp_path / "base"), "-o",
                                    str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output[res.output.index("{"):])["speedup"] == pytest.approx(2.0)

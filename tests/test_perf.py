"""Perf harness: dataset conversion (real MT-bench / HumanEval files), the harness files written into bundles, and
a real AIPerf run against a real tritonserver on the tiny model, with the report and `perf compare` built from the
export files it produced."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt import datasets
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


def test_prompts_are_taken_one_per_category_in_turn():
    mt = datasets.mtbench_prompts()
    eight = datasets.take_prompts(mt, 8)
    assert [p.category for p in eight] == ["writing", "roleplay", "reasoning", "math", "coding", "extraction",
                                           "stem", "humanities"]
    assert [p.id for p in eight] == [mt[10 * i].id for i in range(8)]  # the first of each, file order kept
    ten = datasets.take_prompts(mt, 10)
    assert ten[:8] == eight and [p.id for p in ten[8:]] == [mt[1].id, mt[11].id]
    assert datasets.take_prompts(mt, 0) == mt and datasets.take_prompts(mt, 500) == mt
    assert sorted(p.id for p in datasets.take_prompts(mt, 79)) == sorted(p.id for p in mt if p.id != mt[79].id)
    plain = [datasets.Prompt(str(i), f"p{i}") for i in range(5)]  # no categories: the first n
    assert datasets.take_prompts(plain, 3) == plain[:3]


def test_input_file_writers(tmp_path):
    prompts = datasets.mtbench_prompts()[:3]
    gp = datasets.write_genai_perf_input(prompts, tmp_path / "g.jsonl").read_text().splitlines()
    ap = datasets.write_aiperf_input(prompts, tmp_path / "a.jsonl", 64).read_text().splitlines()
    assert [json.loads(x) for x in gp] == [{"text": p.text} for p in prompts]
    assert [json.loads(x) for x in ap] == [{"text": p.text, "output_length": 64} for p in prompts]
    talk = [datasets.conversation(list(p.turns), ["answer"]) for p in prompts]
    both = [json.loads(x) for x in datasets.write_aiperf_input(prompts, tmp_path / "b.jsonl", 8, talk)
            .read_text().splitlines()]
    assert len(both) == 6 and both[3]["text"] == prompts[0].turns[1]
    assert json.loads(both[3]["extra"]["messages"]) == [{"role": "user", "content": prompts[0].turns[0]},
                                                        {"role": "assistant", "content": "answer"},
                                                        {"role": "user", "content": prompts[0].turns[1]}]


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
                                    "--warmup", "1", "--rounds", "2", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output[res.output.index("{"):])
    for key in ("speedup", "mean_accepted_length", "identical"):
        assert key in report
    assert report["identical"] is True and report["compared_requests"] == 8  # both turns of 4 MT-bench prompts
    assert set(report["per_turn_speedup"]) == {"turn 1", "turn 2"} and report["settings"]["turns"] == "auto"
    rounds = report["rounds"]  # two runs of each model; the metrics are the faster one's
    assert len(rounds["eagle_model"]) == len(rounds["base_model"]) == 2 and report["settings"]["rounds"] == 2
    assert report["eagle"]["output_token_throughput"] == max(rounds["eagle_model"])
    assert report["speedup"] == pytest.approx(max(rounds["eagle_model"]) / max(rounds["base_model"]))
    assert report["speedup"] > 0 and report["mean_accepted_length"] >= 1.0
    assert report["acceptance_source"] == "responses"  # per-request figures first; the metrics scraped beside them
    assert report["eagle"]["scraped_metrics"]["requests"] == 8 + 1 and report["base"]["scraped_metrics"]["draft_tokens"] == 0
    assert report["eagle"]["output_token_throughput"] > 0 and report["base"]["time_to_first_token_ms"] > 0
    perf = bundle / "perf"
    assert json.loads((perf / "report.json").read_text())["identical"] is True
    assert "identical outputs: **yes**" in (perf / "report.md").read_text()
    for png in ("throughput.png", "latency_distributions.png"):
        assert (perf / png).stat().st_size > 1000
    run_dir = Path(report["settings"]["run_dir"])
    assert (run_dir / "eagle_model-round2" / "profile_export_aiperf.json").exists()
    assert "rounds (output tok/s, the best of each compared): eagle_model" in (perf / "report.md").read_text()
    out = tmp_path / "cmp"
    cmp = CliRunner().invoke(main, ["perf", "compare", report["eagle"]["artifact_dir"],
                                    report["base"]["artifact_dir"], "-o", str(out), "--json"])
    assert cmp.exit_code == 0, cmp.output
    again = json.loads(cmp.output[cmp.output.index("{"):])
    assert again["speedup"] == pytest.approx(report["speedup"]) and again["identical"] is True
    assert (out / "report.md").exists()


def test_rounds_pick_the_fastest_run_and_check_every_run(tmp_path):
    from eagle_trt.perf.aiperf_run import RequestResult, RunResult
    from eagle_trt.perf.report import best_run, build_report, summary_table, with_rounds

    def run(model, tps, texts):
        reqs = [RequestResult(f"q{i}", t, 10, 100.0, 5.0, 10.0) for i, t in enumerate(texts)]
        return RunResult(model, {"output_token_throughput": {"avg": tps}}, reqs, tmp_path)

    eagles = [run("eagle_model", 150.0, ["a", "b"]), run("eagle_model", 180.0, ["a", "b"])]
    bases = [run("base_model", 100.0, ["a", "b"]), run("base_model", 90.0, ["a", "b"])]
    assert best_run(eagles) is eagles[1] and best_run(bases) is bases[0]
    report = with_rounds(build_report(best_run(eagles), best_run(bases)), eagles, bases)
    assert report["speedup"] == pytest.approx(1.8) and report["identical"] is True
    assert report["rounds"] == {"eagle_model": [150.0, 180.0], "base_model": [100.0, 90.0]}
    assert "eagle_model 150.0 / 180.0; base_model 100.0 / 90.0" in summary_table(report)
    eagles[0].requests[1].text = "different"  # a slower eagle run that changed its output still fails the check
    report = with_rounds(build_report(best_run(eagles), best_run(bases)), eagles, bases)
    assert report["identical"] is False and report["mismatched_prompts"] == ["q1"]


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


def test_second_turns_need_a_bundle_that_takes_messages(tiny_base, eagle3_draft, tmp_path):
    from eagle_trt.errors import EagleTrtError
    from eagle_trt.perf.run import PerfRequest, run_perf

    out = tmp_path / "llmapi"
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle3_draft), "-o", str(out),
                                    "--engine", "llmapi", "--tree", "chain:3", "--dry-run"])
    assert res.exit_code == 0, res.output
    with pytest.raises(EagleTrtError, match="does not take") as err:  # refused before any request is sent
        run_perf(PerfRequest(out, url="http://127.0.0.1:9", requests=2, turns="both"))
    assert "--turns first" in err.value.hint

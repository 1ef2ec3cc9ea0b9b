"""A real AIPerf run against a real tritonserver on the tiny model: `eagle-trt perf run` with the report and
`perf compare` built from the export files it produced."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.cli import main

AIPERF = Path(__file__).resolve().parents[2] / ".venv-aiperf" / "bin" / "aiperf"


@pytest.mark.skipif(not AIPERF.exists(), reason="AIPerf is installed by `make aiperf` (make test does it)")
def test_real_aiperf_run_report_and_compare(pytorch_bundle, tmp_path):
    res = CliRunner().invoke(main, ["perf", "run", str(pytorch_bundle), "--requests", "4", "--max-tokens", "12",
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
    perf = pytorch_bundle / "perf"
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

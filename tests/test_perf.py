"""Perf harness: dataset conversion (real MT-bench / HumanEval files) and the harness files written into bundles
(the real AIPerf run against tritonserver: tests/server/test_server_perf.py)."""

import json
from pathlib import Path

import pytest

from eagle_trt.errors import EagleTrtError
from eagle_trt import chat, datasets
from eagle_trt.perf.harness_files import CLOSED_LOOP_RATE, aiperf_command, genai_perf_command

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


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
    talk = [chat.conversation(list(p.turns), ["answer"]) for p in prompts]
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
    # closed loop at --concurrency, paced by a timer (AIPerf's zero-interval loop spins a core while slots are busy)
    assert a[a.index("--concurrency") + 1] == "1" and a[a.index("--arrival-pattern") + 1] == "constant"
    assert float(a[a.index("--request-rate") + 1]) == CLOSED_LOOP_RATE >= 100


def test_bundle_has_the_harness_files(pytorch_bundle):
    perf = pytorch_bundle / "perf"
    for name in ("genai_perf.sh", "aiperf.sh", "README.md", "mt_bench.genai_perf.jsonl", "mt_bench.aiperf.jsonl",
                 "humaneval.aiperf.jsonl"):
        assert (perf / name).exists(), name
    script = (perf / "genai_perf.sh").read_text()
    assert "genai-perf profile -m eagle_model --service-kind triton --backend tensorrtllm" in script
    assert "-m base_model" in script and "--concurrency 1" in script
    assert len((perf / "mt_bench.aiperf.jsonl").read_text().splitlines()) == 80

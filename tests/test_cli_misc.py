"""CLI: help output, generate (local), bench, demo-model."""

import json

import pytest
from click.testing import CliRunner

from eagle_trt.cli import COMMANDS, SECTIONS, main


def test_help_lists_every_command_and_each_has_an_example():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    assert all(f"{title}:" in res.output for title in SECTIONS)  # grouped, in the table's order
    assert [res.output.index(f"{title}:") for title in SECTIONS] == sorted(res.output.index(f"{t}:") for t in SECTIONS)
    for name in COMMANDS:
        assert name in res.output
        sub = CliRunner().invoke(main, [name, "--help"])
        assert sub.exit_code == 0, (name, sub.output)
        assert "Example" in sub.output, name
        assert "\n    eagle-trt " + name in sub.output, name  # the example runs this very command
    for sub in ("run", "compare"):
        res = CliRunner().invoke(main, ["perf", sub, "--help"])
        assert res.exit_code == 0 and "Example" in res.output and f"eagle-trt perf {sub} " in res.output, sub


def test_generate_local_json_and_plain_identity(tiny_base, eagle1_draft):
    args = ["generate", "--base", str(tiny_base), "Tell me a story", "--max-tokens", "20", "--json"]
    plain = json.loads(CliRunner().invoke(main, args).output)
    eagle = json.loads(CliRunner().invoke(main, args + ["--draft", str(eagle1_draft), "--tree", "dynamic:3,4,10"]).output)
    assert eagle["token_ids"] == plain["token_ids"] and eagle["text"] == plain["text"]
    for key in ("steps", "mean_accepted_length", "acceptance_rate"):
        assert key in eagle["stats"]
    assert plain["stats"]["acceptance_rate"] == 0.0


def test_generate_stream_and_errors(tiny_base, eagle1_draft):
    args = ["generate", "--base", str(tiny_base), "--draft", str(eagle1_draft), "Hi", "--max-tokens", "8", "--no-chat"]
    whole = json.loads(CliRunner().invoke(main, args + ["--json"]).stdout)
    res = CliRunner().invoke(main, args + ["--stream"])
    assert res.exit_code == 0, res.output
    assert whole["text"] and res.stdout == whole["text"] + "\n"  # the streamed pieces add up to the whole text
    bad = CliRunner().invoke(main, ["generate", "--base", str(tiny_base), "Hi", "--max-tokens", "0"])
    assert bad.exit_code == 2 and "Invalid value for '--max-tokens': 0 is not in the range x>=1" in bad.output
    both = CliRunner().invoke(main, ["generate", "Hi"])
    assert both.exit_code == 2
    tree = CliRunner().invoke(main, ["generate", "--base", str(tiny_base), "Hi", "--tree", "nonsense"])
    assert tree.exit_code == 1 and "unknown tree 'nonsense'" in tree.output
    temp = CliRunner().invoke(main, ["generate", "--base", str(tiny_base), "Hi", "--temperature", "-1"])
    assert temp.exit_code == 2 and "Invalid value for '--temperature': -1.0 is not in the range x>=0.0" in temp.output


def test_bench_writes_json(tiny_base, eagle1_draft, tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--draft", str(eagle1_draft), "--prompts", "2",
                                    "--max-tokens", "8", "--trees", "chain:2;dynamic:2,2,4", "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    rows = json.loads(out.read_text())["rows"]
    assert set(rows) == {"plain", "chain:2", "dynamic:2,2,4"}
    assert all(r["identical_to_plain"] for r in rows.values()) and rows["plain"]["speedup"] == 1.0
    assert "| chain:2 |" in res.output
    for row in rows.values():  # two prompts: MT-bench's first writing and first roleplay question
        cats = row["per_category"]
        assert set(cats) == {"writing", "roleplay"} and sum(c["tokens"] for c in cats.values()) == row["tokens"]
        assert sum(c["seconds"] for c in cats.values()) == pytest.approx(row["seconds"])
    assert all(c["speedup"] == pytest.approx(1.0) for c in rows["plain"]["per_category"].values())
    assert all(c["mean_accepted_length"] == 1.0 for c in rows["plain"]["per_category"].values())
    for name in ("chain:2", "dynamic:2,2,4"):  # the step-weighted mean of the categories is the row's
        cats = rows[name]["per_category"].values()
        assert 1.0 <= min(c["mean_accepted_length"] for c in cats) <= rows[name]["mean_accepted_length"] \
            <= max(c["mean_accepted_length"] for c in cats) <= 3.0
    assert "Per category: speedup over plain" in res.output and "| dynamic:2,2,4 | " in res.output


def test_bench_compares_drafts_on_the_same_prompts(tiny_base, eagle1_draft, eagle3_draft, tmp_path):
    out = tmp_path / "b.json"
    res = CliRunner().invoke(main, ["bench", "--base", str(tiny_base), "--draft", str(eagle1_draft), "--draft",
                                    str(eagle3_draft), "--prompts", "3", "--max-tokens", "6", "--trees", "chain:2",
                                    "--json-out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert set(result["rows"]) == {"plain", "eagle1 chain:2", "eagle3 chain:2"}
    assert result["prompts_done"] == result["prompts_total"] == 6  # MT-bench as defined: both turns of 3 prompts
    for row in result["rows"].values():
        assert row["prompts"] == 6 and row["identical_prompts"] == 6 and row["tokens"] > 0
    assert set(result["rows"]["eagle1 chain:2"]["per_turn"]) == {"turn 1", "turn 2"}
    assert "| eagle3 chain:2 |" in res.output and "yes (6/6)" in res.output and "Per turn" in res.output


def test_second_turn_is_the_conversation_with_the_first_answer():
    from eagle_trt.chat import conversation

    assert conversation(["q1", "q2"], ["a1"]) == [{"role": "user", "content": "q1"},
                                                  {"role": "assistant", "content": "a1"},
                                                  {"role": "user", "content": "q2"}]
    assert conversation(["q1"], []) == [{"role": "user", "content": "q1"}]


def test_demo_model_prints_its_directory_last(monkeypatch, tmp_path):
    pytest.importorskip("gguf")
    from eagle_trt.demo_model import DRAFT_DIR

    res = CliRunner().invoke(main, ["demo-model"])
    assert res.exit_code == 0, res.output
    base = res.output.strip().splitlines()[-1]
    assert (__import__("pathlib").Path(base) / "model.safetensors").exists()
    draft = CliRunner().invoke(main, ["demo-model", "--draft"])
    if (DRAFT_DIR / "config.json").exists():
        assert draft.exit_code == 0 and draft.output.strip().splitlines()[-1] == str(DRAFT_DIR)
    else:
        assert draft.exit_code == 1 and "shipped SmolLM2 draft is missing" in draft.output
    from eagle_trt.demo_model import DRAFT_DIRS
    from eagle_trt.spec import DraftSpec

    draft3 = CliRunner().invoke(main, ["demo-model", "--draft", "--format", "eagle3"])
    assert draft3.exit_code == 0, draft3.output
    assert draft3.output.strip().splitlines()[-1] == str(DRAFT_DIRS["eagle3"])
    assert DraftSpec.from_dir(DRAFT_DIRS["eagle3"]).format == "eagle3"
    assert DraftSpec.from_dir(DRAFT_DIR).format == "eagle1"


def test_demo_base_says_paris():
    """The materialized SmolLM2 generates sensible text with transformers (chat template, greedy)."""
    import pytest
    import torch

    pytest.importorskip("gguf")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eagle_trt.demo_model import materialize_demo_base

    d = materialize_demo_base()
    tok, model = AutoTokenizer.from_pretrained(d), AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    text = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}], tokenize=False,
                                   add_generation_prompt=True)
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.generate(ids, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])


def test_demo_base_is_a_complete_hf_checkpoint():
    """The index file lists every tensor of the one shard (EAGLE's reference code finds lm_head through it)."""
    import json

    import pytest

    pytest.importorskip("gguf")
    from eagle_trt.checkpoints.readers import ST_INDEX, read_safetensors_header
    from eagle_trt.demo_model import materialize_demo_base

    d = materialize_demo_base()
    index = json.loads((d / ST_INDEX).read_text())
    assert index["weight_map"] == {name: "model.safetensors" for name in read_safetensors_header(d / "model.safetensors")}
    from safetensors.torch import load_file

    tensors = load_file(str(d / "model.safetensors"))
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in d.iterdir()}

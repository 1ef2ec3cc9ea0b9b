"""`--tree auto`: the tuner's arithmetic on synthetic cost/acceptance tables (known optima), the acceptance counter,
the profile and a whole tuning run on the tiny models (cached)."""

import json

import pytest
import torch

from eagle_trt.tuning.acceptance import AcceptanceCounter, probe_tree
from eagle_trt.tuning.calibrate import TuneRequest, TuneResult, predict, tune
from eagle_trt.tuning.profile import ProfileConfig, format_table, profile_decoder
from eagle_trt.tuning.tree_tuner import (
    SUFFIX_KEEP_WITHIN,
    TIE_WITHIN,
    CostModel,
    choose_tree,
    grow_tree,
    ranked_static_trees,
    static_step_ms,
)
from eagle_trt.runtime import EagleDecoder
from eagle_trt.runtime.drafting import DraftTree
from eagle_trt.tree_config import TreeConfig, resolve

# p[d][r]: the draft's rank-r candidate is the base's token at depth d+1
ACCEPT = [[0.6, 0.2, 0.1, 0.05], [0.5, 0.2, 0.1, 0.05], [0.5, 0.15, 0.1, 0.05], [0.4, 0.15, 0.1, 0.05]]
FLAT = CostModel(verify={1: 10.0, 64: 10.0}, draft={1: 0.0, 64: 0.0}, topk={1: 0.0, 64: 0.0})
STEEP = CostModel(verify={1: 10.0, 64: 640.0}, draft={1: 0.0, 64: 0.0}, topk={1: 0.0, 64: 0.0})


def test_grow_tree_takes_the_most_valuable_nodes():
    tree, accepted = grow_tree(ACCEPT, 3)
    assert tree.to_list() == [[0], [1], [0, 0]]  # values 0.6, 0.2 and 0.6*0.5 = 0.3 beat [2] (0.1)
    assert accepted == pytest.approx(1 + 0.6 + 0.2 + 0.3)


def test_flat_cost_gives_the_widest_tree_the_budget_allows():
    choice = ranked_static_trees(ACCEPT, FLAT, max_nodes=20)[0]
    cfg = resolve(choice.arg)
    assert cfg.tree.num_nodes == 20
    assert choice.speedup == pytest.approx(choice.accepted_length)  # a verify costs what a decode step costs


def test_cost_linear_in_tokens_gives_a_short_chain():
    choice = ranked_static_trees(ACCEPT, STEEP, max_nodes=20)[0]
    assert choice.arg == "chain:1"
    assert choice.speedup < 1  # honest: on such a machine speculation cannot pay


def test_ranked_static_trees_are_distinct_and_fastest_first():
    ranked = ranked_static_trees(ACCEPT, STEEP, max_nodes=20)
    speeds = [c.tok_per_s for c in ranked]
    assert speeds == sorted(speeds, reverse=True) and len({c.arg for c in ranked}) == len(ranked)
    assert {"chain:1", "chain:2"} <= {c.arg for c in ranked}  # chains are always among the candidates


def test_step_cost_counts_verify_topk_and_draft_forwards():
    cost = CostModel(verify={1: 10.0, 8: 17.0}, draft={1: 1.0, 8: 8.0}, topk={1: 0.5, 8: 4.0}, overhead=2.0)
    tree = resolve("static:[[0],[1],[0,0],[0,0,0]]").tree
    # verify 5 tokens (interpolated 14) + overhead 2 + update forward over 2 accepted (2)
    # depth 1: top-k of 1 parent; forward over [0] (1 row) | depth 2: top-k 1, forward over [0,0] | depth 3: top-k 1
    assert static_step_ms(tree, cost, 2.0) == pytest.approx(14 + 2 + 2 + 3 * 0.5 + 2 * 1.0)


def test_predict_matches_the_choice():
    cost = FLAT
    choice = ranked_static_trees(ACCEPT, cost, max_nodes=6)[0]
    result = TuneResult(chosen=choice.to_dict(), candidates=[], acceptance=ACCEPT, context=128,
                        profile={"base_forward_ms": {"128": {"1": 10.0, "64": 10.0}}, "draft_step_ms": {"1": 0.0},
                                 "topk_ms": {"1": 0.0}},
                        overhead_ms=0.0, plain_overhead_ms=0.0, measured_plain_ms=10.0, seconds=0.0, skipped=[],
                        budget_s=0.0, request={}, tuner_version=0)
    again = predict(result, choice.arg)
    assert again.accepted_length == pytest.approx(choice.accepted_length)
    assert again.tok_per_s == pytest.approx(choice.tok_per_s)
    assert predict(result, "dynamic:3,4,10") is None  # dynamic trees are only known by measurement


def test_choice_keeps_suffix_candidates_unless_they_lose_by_more_than_the_noise():
    keep = 1.0 - SUFFIX_KEEP_WITHIN
    measured = {"chain:3": 44.2, "chain:3+suffix:2,6": 44.2 * 0.990, "chain:3+suffix:4,8": 44.2 * 0.987,
                "chain:2": 43.0, "dynamic:3,2,4": 36.0}
    assert choose_tree(measured) == "chain:3+suffix:2,6"  # the fastest with suffix candidates, 1 % behind
    measured["chain:2+suffix:4,8"] = 44.0
    assert choose_tree(measured) == "chain:2+suffix:4,8"  # on another drafted tree too
    losing = {"chain:3": 44.2, "chain:3+suffix:4,8": 44.2 * keep * 0.99, "chain:1": 40.0}
    assert choose_tree(losing) == "chain:3"  # past the noise: they cost here
    faster = {"chain:3": 44.2, "chain:3+suffix:4,8": 45.0, "chain:1+suffix:4,8": 46.0}
    assert choose_tree(faster) == "chain:1+suffix:4,8"  # the fastest, with them already
    assert choose_tree({"chain:3": 44.2, "dynamic:3,2,4": 50.0}) == "dynamic:3,2,4"  # none measured: the fastest


def test_a_tie_goes_to_the_tree_that_verifies_fewer_rows():
    tie = 1.0 - TIE_WITHIN
    wide = "static:[[0],[1],[0,0],[0,0,0]]+suffix:4,8"
    measured = {wide: 221.1, "chain:1+suffix:4,8": 221.1 * (tie + 0.005), "chain:1+suffix:2,6": 221.1 * (tie - 0.01),
                "static:[[0],[1],[0,0],[0,0,0]]": 215.3, "chain:1": 205.9}
    assert choose_tree(measured) == "chain:1+suffix:4,8"  # within the spread: 1 drafted row, not 4
    measured["chain:1+suffix:4,8"] = 221.1 * (tie - 0.005)
    assert choose_tree(measured) == wide  # past it: the measured winner
    same_rows = {"chain:3+suffix:4,8": 50.0, "chain:3+suffix:2,6": 50.0 * (tie + 0.01), "chain:3": 40.0}
    assert choose_tree(same_rows) == "chain:3+suffix:4,8"  # as many drafted rows: the fastest of them
    plain_trees = {"dynamic:3,2,4": 50.0, "chain:2": 50.0 * (tie + 0.001), "chain:1": 45.0}
    assert choose_tree(plain_trees) == "chain:2"  # no suffix candidates measured: the same rule


def test_acceptance_counter_walks_the_spine():
    tree = probe_tree(depth=2, width=2)  # [0], [1], [0,0], [0,1]
    counter = AcceptanceCounter(2, 2)
    parents = tree.parents().tolist()
    tokens = torch.tensor([9, 10, 11, 12, 13])  # root, [0]=10, [1]=11, [0,0]=12, [0,1]=13
    draft_tree = DraftTree.from_parents(tokens, parents, "cpu")
    logits = torch.zeros(5, 20)
    logits[0, 10] = 1  # the base continues the root with 10 = rank 0 -> descend
    logits[1, 13] = 1  # then with 13 = rank 1 at depth 2
    counter(draft_tree, logits)
    logits[0, 10], logits[0, 11] = 0, 1  # next step: rank 1 at depth 1 -> stop there
    counter(draft_tree, logits)
    assert counter.reached == [2, 1] and counter.hits == [[1, 1], [0, 1]]
    assert counter.table() == [[0.5, 0.5], [0.0, 0.0]]  # made non-increasing in rank


def test_profile_on_tiny_models(tiny_base, eagle1_draft):
    decoder = EagleDecoder.load(tiny_base, eagle1_draft, tree="chain:1", dtype="int8")
    result = profile_decoder(decoder, ProfileConfig(tokens=(1, 4), contexts=(16, 64), draft_widths=(1, 2), repeats=1))
    assert set(result["base_forward_ms"]) == {"16", "64"}
    assert all(ms > 0 for row in result["base_forward_ms"].values() for ms in row.values())
    assert set(result["draft_step_ms"]) == {"1", "2"} and result["engine"]["dtype"] == "int8"
    assert "T=4" in format_table(result)


def test_tune_on_tiny_models_is_cached(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_TRT_CACHE", str(tmp_path))
    req = TuneRequest(tiny_base, eagle1_draft, dtype="int8", prompts=2, max_tokens=6, max_nodes=8)
    first = tune(req)
    resolve(first.tree)  # a valid --tree value
    assert first.chosen["predicted_tok_per_s"] > 0 and len(first.acceptance) == 6
    measured = {c["tree"]: c["measured_tok_per_s"] for c in first.candidates}
    assert len(measured) in (12, 13) and min(measured.values()) > 0  # 3 static (+ a chain), 5 dynamic, 4 suffix
    assert sum("+suffix" in tree for tree in measured) == 4  # on each of the two fastest drafted trees
    assert any(tree.startswith("chain:") for tree in measured)
    assert first.tree == choose_tree(measured)  # the fastest measured, suffix candidates kept within the noise
    files = list((tmp_path / "tuning").glob("*.json"))
    assert len(files) == 1 and TuneResult.from_dict(json.loads(files[0].read_text())) == first
    assert tune(req) == first  # read back, not measured again


def test_build_defaults_to_the_tuned_tree_and_records_it(tiny_base, eagle1_draft, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from eagle_trt.cli import main
    from eagle_trt.model_repository import configs as C

    monkeypatch.setenv("EAGLE_TRT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                       str(out), "--engine", "pytorch", "--dtype", "int8", "--max-seq-len", "512"])
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "eagle_trt_spec.json").read_text())
    assert saved["dtype"] == "int8" and resolve(saved["tree_tuning"]["tree"]) == TreeConfig.from_dict(saved["tree"])
    assert saved["tree_tuning"]["predicted_tok_per_s"] > 0 and saved["tree_tuning"]["dtype"] == "int8"
    config = C.parse((out / "model_repository" / "eagle_engine" / "config.pbtxt").read_text())
    assert config.parameters["bundle_spec"].string_value == str(out.resolve() / "eagle_trt_spec.json")  # it serves
    assert config.parameters["speculative"].string_value == "true"  # the spec's tree, at the spec's dtype

"""Static trees: choices validation, masks, depths, retrieve paths, packed masks, brace round trip, --tree parsing."""

import json

import numpy as np
import pytest

from eagle_trt.build_spec import TrtllmSettings
from eagle_trt.engines.trtllm import tree_breaches
from eagle_trt.errors import EagleTrtError
from eagle_trt.tree import MC_SIM_7B_63, Tree, ancestor_mask, pack_mask
from eagle_trt.tree_config import DEFAULT_RUNTIME_TREE, TreeConfig, resolve
from eagle_trt.engines import get

SMALL = [[0], [1], [0, 0], [0, 1]]


def test_small_tree_hand_checked():
    t = Tree.from_choices([[0, 1], [1], [0], [0, 0]])  # order of input does not matter
    assert t.choices == ((0,), (1,), (0, 0), (0, 1))
    assert t.num_nodes == 4 and t.depth == 2
    assert t.parents().tolist() == [-1, 0, 0, 1, 1]
    assert t.depths().tolist() == [0, 1, 1, 2, 2]
    assert t.children() == [[1, 2], [3, 4], [], [], []]
    expected = np.array([[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [1, 0, 1, 0, 0],
                         [1, 1, 0, 1, 0],
                         [1, 1, 0, 0, 1]], dtype=bool)
    assert (t.attention_mask() == expected).all()
    assert pack_mask(t.attention_mask())[:, 0].tolist() == [1, 3, 5, 11, 19]
    assert t.non_leaves_per_depth() == [1, 1]


def test_chain_packed_rows_are_low_bit_runs():
    t = Tree.chain(5)
    assert t.depth == 5 and t.num_nodes == 5
    assert pack_mask(t.attention_mask())[:, 0].tolist() == [(1 << (i + 1)) - 1 for i in range(6)]


def test_trtllm_default_tree():
    t = Tree.named("mc_sim_7b_63")
    assert t.num_nodes == 63 and t.depth == 4
    assert t.non_leaves_per_depth() == [1, 10, 10, 1]
    assert tree_breaches(t, TrtllmSettings(max_draft_len=63, num_eagle_layers=4, max_non_leaves_per_layer=10)) == []
    mask = t.attention_mask()
    assert mask.shape == (64, 64) and np.array_equal(mask, np.tril(mask))  # parents first: lower-triangular
    assert pack_mask(mask).shape == (64, 2)
    # every row's visible set is exactly its root-to-node path
    for row, depth in zip(mask, t.depths()):
        assert row.sum() == depth + 1


def test_eagle_default_differs_from_trtllm_default():
    t = Tree.named("eagle_default")
    assert t.num_nodes == 25 and t.depth == 5 and len(t.children()[0]) == 4
    assert t.choices != Tree.named("mc_sim_7b_63").choices


@pytest.mark.parametrize("n", [1, 31, 32, 33, 64, 65])
def test_pack_unpack_word_boundaries(n):
    rng = np.random.default_rng(n)
    mask = rng.random((n, n)) < 0.5
    packed = pack_mask(mask)
    assert packed.dtype == np.int32 and packed.shape == (n, (n + 31) // 32)
    words = packed.view(np.uint32).astype(np.int64)
    bits = np.array([[(words[r, j // 32] >> (j % 32)) & 1 for j in range(n)] for r in range(n)], dtype=bool)
    assert (bits == mask).all()  # bit j of word j // 32, LSB first
    assert not (words[:, -1] >> (n - 32 * (words.shape[1] - 1))).any()  # padding bits are zero


@pytest.mark.parametrize("parents, rows", [
    ([-1], [[1]]),
    ([-1, 0, 1, 2], [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]),
    ([-1, 0, 0, 1, 2], [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 0, 1, 0, 1]]),
])
def test_ancestor_mask(parents, rows):
    assert ancestor_mask(parents).astype(int).tolist() == rows


@pytest.mark.parametrize("choices", [SMALL, MC_SIM_7B_63, [[0], [0, 0], [0, 0, 0]]])
def test_brace_round_trip(choices):
    t = Tree.from_choices(choices)
    text = t.to_brace()
    assert "[" not in text and text.startswith("{0}")
    assert Tree.from_choices([[int(x) for x in c.split(",")] for c in text[1:-1].split("}, {")]) == t


@pytest.mark.parametrize("bad, words", [
    ([], "non-empty"),
    ([[0], [0]], "twice"),
    ([[0, 0]], "no parent"),
    ([[0], [-1]], "invalid path"),
    ([[0], [1.5]], "invalid path"),
    ([[0], []], "invalid path"),
    ("[[0]]", "non-empty list"),
])
def test_invalid_choices(bad, words):
    with pytest.raises(EagleTrtError, match=words):
        Tree.from_choices(bad)


def test_trtllm_tree_breaches_are_each_named():
    t = Tree.named("mc_sim_7b_63")
    msg = "; ".join(tree_breaches(t, TrtllmSettings(max_draft_len=60, num_eagle_layers=3, max_non_leaves_per_layer=8)))
    assert "depth 4 != num_eagle_layers 3" in msg
    assert "63 nodes > max_draft_len 60" in msg
    assert "10 non-leaf nodes" in msg and "--max-non-leaves-per-layer 10" in msg


def test_resolve(tmp_path):
    assert resolve("chain:3").tree == Tree.chain(3)
    assert resolve("static:mc_sim_7b_63").tree.num_nodes == 63
    f = tmp_path / "tree.json"
    f.write_text(json.dumps(SMALL))
    assert resolve(f"static:{f}").tree == Tree.from_choices(SMALL)
    assert resolve("static:[[0],[0,0]]").tree.depth == 2
    dyn = resolve("dynamic:5,8,48")
    assert (dyn.kind, dyn.depth, dyn.top_k, dyn.total_tokens) == ("dynamic", 5, 8, 48)
    for cfg in (dyn, resolve("chain:3"), resolve("static:eagle_default")):
        assert resolve(cfg.to_arg()) == cfg


@pytest.mark.parametrize("arg, words", [
    ("chain", "neither a named tree"), ("chain:x", "chain length"), ("chain:0", "positive"),
    ("static:nope", "neither a named tree nor an existing file"), ("dynamic:5,8", "three integers"),
    ("dynamic:0,8,8", ">= 1"), ("dynamic:1,2,100", "at most"), ("beam:3", "neither a named tree"),
    ("auto", "asks for tuning"), ("static:", "invalid tree spec"),
])
def test_resolve_errors(arg, words):
    """Every malformed --tree value is refused by the one resolver, naming what was wrong."""
    with pytest.raises(EagleTrtError, match=words):
        resolve(arg)


def test_tree_file_errors(tmp_path):
    with pytest.raises(EagleTrtError, match="does not exist"):
        Tree.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(EagleTrtError, match="not readable JSON"):
        Tree.from_file(bad)


def test_resolve_reads_a_file_once_and_holds_its_choices(tmp_path, monkeypatch):
    """`--tree my.json` means the file's choices wherever the result is used: a bare file name resolves against the
    working directory at resolve time, and the stored form (to_dict, to_arg) carries the choices, not the name."""
    (tmp_path / "my.json").write_text(json.dumps(SMALL))
    monkeypatch.chdir(tmp_path)
    cfg = resolve("my.json")
    assert cfg.kind == "static" and cfg.tree == Tree.from_choices(SMALL)
    assert cfg.source == str(tmp_path / "my.json") and "my.json" in cfg.label()
    monkeypatch.chdir("/")
    assert "my.json" not in cfg.to_arg() and resolve(cfg.to_arg()) == cfg
    stored = json.loads(json.dumps(cfg.to_dict()))
    assert TreeConfig.from_dict(stored) == cfg and stored["choices"] == Tree.from_choices(SMALL).to_list()
    assert resolve("eagle_default") == resolve("static:eagle_default")  # a bare name is a static tree


@pytest.mark.parametrize("arg", ["chain:3", "dynamic:4,2,6", "static:eagle_default", "static:[[0],[1],[0,0]]"])
def test_tree_config_round_trips_through_its_stored_form(arg):
    cfg = resolve(arg)
    back = TreeConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.max_draft_tokens == cfg.max_draft_tokens and back.to_arg() == cfg.to_arg()


@pytest.mark.parametrize("data, words", [
    ({"kind": "chain", "choices": [[0], [1]]}, "a chain's choices"),
    ({"kind": "dynamic", "depth": 0, "top_k": 2, "total_tokens": 2}, ">= 1"),
    ({"kind": "static", "choices": [[0, 0]]}, "no parent"), ({"kind": "beam"}, "not a stored"),
    ("chain:3", "not a stored"),
])
def test_tree_config_from_dict_refuses_what_resolve_refuses(data, words):
    with pytest.raises(EagleTrtError, match=words):
        TreeConfig.from_dict(data)


def test_resolve_per_engine():
    """Each engine kind's default and its own rules: TensorRT-LLM engines static trees, vLLM chains, the LLM API
    its dynamic-tree bounds."""
    assert get("pytorch").tree(None) == resolve(DEFAULT_RUNTIME_TREE)
    assert get("trtllm").tree(None).tree == Tree.named("mc_sim_7b_63")
    assert get("llmapi").tree(None) == get("vllm").tree(None) == resolve("chain:3")
    with pytest.raises(EagleTrtError, match="needs a static tree"):
        get("trtllm").tree("dynamic:4,2,6")
    with pytest.raises(EagleTrtError, match="chains only"):
        get("vllm").tree("eagle_default")
    with pytest.raises(EagleTrtError, match="DEPTH\\+1 <= TOKENS"):
        get("llmapi").tree("dynamic:5,8,4")
    cfg = resolve("dynamic:5,8,4")  # fine for our engine
    assert get("pytorch").tree(cfg) is cfg

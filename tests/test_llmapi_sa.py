"""The LLM-API route's suffix candidates (`sa_config`) and load policy (`draft_len_schedule`), checked against
TensorRT-LLM's own rules. TensorRT-LLM cannot run here, so its contract is pinned from its source:

NVIDIA/TensorRT-LLM tensorrt_llm/llmapi/llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412:
- `class SAEnhancerConfig(StrictBaseModel)`: `threshold: PositiveInt = 4` ("Minimum suffix match length required for
  the SA output to override neural draft tokens"), `enable_global_pool: bool = False` ("each request searches all
  active SA states"); StrictBaseModel forbids other keys.
- `class Eagle3DecodingConfig(EagleDecodingConfig)`: `sa_config: Optional[SAEnhancerConfig] = None` (status beta).
- `class DecodingBaseConfig`: `draft_len_schedule: Optional[dict[int, int]] = None`; field_validator
  `validate_draft_len_schedule_and_sort`: every key >= 1, every value >= 0, schedule[min key] == max_draft_len, every
  value <= max_draft_len; model_validator: mutually exclusive with `max_concurrency`. Its description: {4:4, 8:2,
  32:1} drafts 4 at batch sizes 1-4, 2 at 5-8, 1 at 9-32, 0 above.
NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/utils.py @ 011d0933dcb5e592f5fa2626beaf42a96324c578:
`get_draft_len_for_batch_size` (bisect_left over the sorted keys: the first key >= batch size, else the floor, 0
for Eagle3's linear draft); the dynamic-tree resource manager is built without a suffix automaton.
NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/sa_enhancer.py @ 1a487b3f2593ca6fc7b86c542ba0be9442ca94e8:
`maybe_override_all_draft_tokens` replaces all K draft tokens where match_len >= threshold.
"""

from bisect import bisect_left

import pytest
import yaml
from click.testing import CliRunner

from eagle_trt.engines import create_spec, get, llmapi_config as llmapi
from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines.llmapi_release import llmapi_release
from eagle_trt.load_policy import LoadPolicy

RELEASE = "1.3"  # sa_config exists from 1.3 (llmapi_release); the pins below were read at 0004396, 1.3's line
R = llmapi_release(RELEASE)

# llm_args.py @ 0004396: the Eagle3DecodingConfig / DecodingBaseConfig fields we may write
EAGLE3_FIELDS = {"decoding_type", "max_draft_len", "max_total_draft_tokens", "speculative_model", "eagle_choices",
                 "use_dynamic_tree", "dynamic_tree_max_topK", "eagle3_layers_to_capture", "sa_config",
                 "draft_len_schedule"}
SA_ENHANCER_FIELDS = {"threshold": int, "enable_global_pool": bool}  # SAEnhancerConfig, extra keys forbidden
SA_THRESHOLD_MIN = 1  # PositiveInt
SCHEDULE_KEY_MIN = 1  # "batch size threshold must be >= 1"
SCHEDULE_VALUE_MIN = 0  # "draft length must be >= 0"
EAGLE3_MIN_DRAFT_LEN = 0  # Eagle3's linear draft: no floor under a scheduled length (utils.py min_draft_len)
MAX_BATCH = 8  # the test bundles' max_batch_size


def trtllm_problems(sc: dict) -> list[str]:
    """What TensorRT-LLM's validators (llm_args.py @ 0004396) would reject in a speculative_config we wrote."""
    problems = [f"unknown field {k}" for k in sorted(set(sc) - (EAGLE3_FIELDS & R.fields))]
    max_draft_len = sc.get("max_draft_len")
    if not isinstance(max_draft_len, int) or max_draft_len <= 0:
        problems.append("max_draft_len must be > 0 for Eagle")
    sa = sc.get("sa_config")
    if sa is not None:
        problems += [f"unknown sa_config field {k}" for k in sorted(set(sa) - set(SA_ENHANCER_FIELDS))]
        problems += [f"sa_config.{k} is not {t.__name__}" for k, t in SA_ENHANCER_FIELDS.items()
                     if k in sa and (type(sa[k]) is not t)]
        if type(sa.get("threshold", 4)) is int and sa.get("threshold", 4) < SA_THRESHOLD_MIN:
            problems.append("sa_config.threshold must be > 0")
    schedule = sc.get("draft_len_schedule")
    if schedule is not None:
        if "max_concurrency" in sc:
            problems.append("max_concurrency and draft_len_schedule are mutually exclusive")
        for batch, length in schedule.items():
            if type(batch) is not int or type(length) is not int:
                problems.append(f"draft_len_schedule entry {batch!r}: {length!r} is not int: int")
                continue
            if batch < SCHEDULE_KEY_MIN:
                problems.append(f"batch size threshold must be >= 1, got {batch}")
            if length < SCHEDULE_VALUE_MIN:
                problems.append(f"draft length must be >= 0, got {length}")
            if isinstance(max_draft_len, int) and length > max_draft_len:
                problems.append(f"draft_len={length} for batch_size={batch} > max_draft_len={max_draft_len}")
        if schedule and schedule[min(schedule)] != max_draft_len:
            problems.append(f"draft_len_schedule[{min(schedule)}] must equal max_draft_len")
    return problems


def trtllm_draft_len(schedule: dict | None, batch: int, max_draft_len: int) -> int:
    """utils.py get_draft_len_for_batch_size: the value of the first key >= batch, else the floor."""
    if schedule is None:
        return max_draft_len
    keys = sorted(schedule)
    idx = bisect_left(keys, batch)
    return max(schedule[keys[idx]], EAGLE3_MIN_DRAFT_LEN) if idx < len(keys) else EAGLE3_MIN_DRAFT_LEN


def our_draft_len(policy: LoadPolicy, batch: int) -> int:
    tree = policy.tree_for(batch)
    return 0 if tree is None else tree.tree.num_nodes


@pytest.mark.parametrize("sc, problem", [
    ({"max_draft_len": 3, "sa_config": {"threshold": 0}}, "threshold must be > 0"),
    ({"max_draft_len": 3, "sa_config": {"threshold": 2, "min_match": 2}}, "unknown sa_config field min_match"),
    ({"max_draft_len": 3, "sa_config": {"threshold": 2, "enable_global_pool": "no"}}, "enable_global_pool is not"),
    ({"max_draft_len": 3, "draft_len_schedule": {0: 3}}, "threshold must be >= 1"),
    ({"max_draft_len": 3, "draft_len_schedule": {1: 3, 4: -1}}, "draft length must be >= 0"),
    ({"max_draft_len": 3, "draft_len_schedule": {1: 2, 4: 1}}, "must equal max_draft_len"),
    ({"max_draft_len": 3, "draft_len_schedule": {1: 3, 4: 4}}, "> max_draft_len"),
    ({"max_draft_len": 3, "draft_len_schedule": {1: 3}, "max_concurrency": 4}, "mutually exclusive"),
    ({"max_draft_len": 3, "suffix": {}}, "unknown field suffix"),
])
def test_the_checker_catches_each_bound(sc, problem):
    assert any(problem in p for p in trtllm_problems(sc)), trtllm_problems(sc)


def test_suffix_becomes_sa_config():
    fields = llmapi.tree_fields(get("llmapi").tree("chain:4+suffix:3,4", RELEASE), R)
    assert fields == {"max_draft_len": 4, "sa_config": {"threshold": 3, "enable_global_pool": False}}
    assert trtllm_problems(fields) == []


@pytest.mark.parametrize("arg, message", [
    ("chain:3+suffix", r"proposes as many tokens as the draft \(max_draft_len 3\), not 8"),  # TRT-LLM has no TOKENS
    ("chain:3+suffix:2,5", r"pass --tree chain:3\+suffix:2,3"),
    ("dynamic:3,2,4+suffix:2,6", "dynamic-tree worker has no suffix automaton"),
    ("static:[[0],[1],[0,0]]+suffix:2,3", "overwrites a linear draft"),
    ("chain:3+suffix:0,3", "1 <= MIN_MATCH"),  # SAEnhancerConfig.threshold is a PositiveInt
])
def test_suffix_trtllm_cannot_mean_the_same_is_refused(arg, message, tiny_base, eagle3_draft):
    with pytest.raises(EagleTrtError, match=message):
        get("llmapi").tree(arg, RELEASE)
    with pytest.raises(EagleTrtError, match=message):
        create_spec(tiny_base, eagle3_draft, engine="llmapi", tree=arg, backend_version=RELEASE)
    if "MIN_MATCH" not in message:
        get("pytorch").tree(arg)  # our own engine runs it as written


@pytest.mark.parametrize("tree, policy, schedule", [
    ("chain:4", "chain:4;chain:4;chain:2;none", {1: 4, 2: 4, 3: 2, 8: 0}),
    ("chain:4", "chain:4;chain:2;chain:1", {1: 4, 2: 2, 8: 1}),  # the last entry holds for every larger batch
    ("chain:3", "chain:3;none", {1: 3, 8: 0}),
    ("chain:4+suffix:3,4", "chain:4+suffix:3,4;chain:2+suffix:3,2", {1: 4, 8: 2}),
    ("chain:4", "chain:4", None),  # the tree at every batch size: nothing to schedule
    ("dynamic:3,2,4", "dynamic:3,2,4", None),
])
def test_load_policy_becomes_draft_len_schedule(tree, policy, schedule):
    cfg, parsed = get("llmapi").tree(tree, RELEASE), LoadPolicy.parse(policy)
    written = llmapi.draft_len_schedule(parsed, cfg, MAX_BATCH, R)
    assert written == schedule
    sc = llmapi.tree_fields(cfg, R) | ({} if written is None else {"draft_len_schedule": written})
    assert trtllm_problems(sc) == []
    if cfg.kind == "chain":  # TensorRT-LLM's lookup gives every batch size the length our policy gives it
        assert [trtllm_draft_len(written, b, sc["max_draft_len"]) for b in range(1, MAX_BATCH + 1)] == \
               [our_draft_len(parsed, b) for b in range(1, MAX_BATCH + 1)]


@pytest.mark.parametrize("tree, policy, naive, message", [
    # a schedule starting elsewhere than max_draft_len: TensorRT-LLM's schedule[min key] == max_draft_len
    ("chain:4", "chain:2;chain:4", {1: 2, 8: 4}, "starts with chain:2, the bundle drafts with chain:4"),
    ("chain:4", "none;chain:4", {1: 0, 8: 4}, "starts with none"),
    # a longer entry: every value <= max_draft_len
    ("chain:3", "chain:3;chain:5", {1: 3, 8: 5}, "longer than the bundle's chain:3"),
    # no per-batch-size form for trees
    ("chain:3", "chain:3;dynamic:1,2,2", None, "dynamic:1,2,2 has no form"),
    ("dynamic:3,2,4", "dynamic:3,2,4;chain:2", None, "only shortens a linear draft"),
    # one sa_config for every batch size
    ("chain:4+suffix:3,4", "chain:4+suffix:3,4;chain:2", None, "other suffix candidates"),
    ("chain:4+suffix:3,4", "chain:4+suffix:3,4;chain:2+suffix:5,2", None, "other suffix candidates"),
    ("chain:4+suffix:3,4", "chain:4+suffix:3,4;chain:2+suffix:3,4", None, r"max_draft_len 2\), not 4"),
    ("chain:4+suffix:3,4", "chain:4+suffix:3,4;none", {1: 4, 8: 0}, "floored to 1 for SA-enhanced drafts"),
])
def test_policies_trtllm_cannot_express_are_refused(tree, policy, naive, message):
    cfg = get("llmapi").tree(tree, RELEASE)
    if naive is not None and "floored" not in message:  # what a plain translation would write: TensorRT-LLM refuses
        assert trtllm_problems(llmapi.tree_fields(cfg, R) | {"draft_len_schedule": naive})
    with pytest.raises(EagleTrtError, match=message) as err:
        llmapi.draft_len_schedule(LoadPolicy.parse(policy), cfg, MAX_BATCH, R)
    assert err.value.hint


def test_yaml_carries_sa_config_and_schedule(tiny_base, eagle3_draft, tmp_path):
    spec = create_spec(tiny_base, eagle3_draft, engine="llmapi", tree="chain:4+suffix:3,4",
                            backend_version=RELEASE)
    assert spec.max_batch_size == MAX_BATCH
    policy = "chain:4+suffix:3,4;chain:4+suffix:3,4;chain:2+suffix:3,2;chain:1+suffix:3,1"
    path = llmapi.write_llmapi_config(spec, tmp_path / "1" / "model.yaml", load_policy=policy)
    for data in (yaml.safe_load(path.read_text()), yaml.safe_load((path.parent / llmapi.SERVE_YAML).read_text())):
        sc = data["speculative_config"]
        assert sc["sa_config"] == {"threshold": 3, "enable_global_pool": False}
        assert sc["draft_len_schedule"] == {1: 4, 2: 4, 3: 2, 8: 1}  # int keys through YAML
        assert trtllm_problems(sc) == []
    assert "draft_len_schedule" not in llmapi.speculative_config(spec)  # auto: TensorRT-LLM's fixed length
    base = llmapi.model_yaml(spec, speculative=False, load_policy=policy)
    assert "speculative_config" not in base


def test_build_writes_them_or_stops_before_any_work(tiny_base, eagle3_draft, tmp_path):
    common = ["build", "--base", str(tiny_base), "--draft", str(eagle3_draft), "--engine", "llmapi",
              "--backend-version", RELEASE, "--tree", "chain:3+suffix:2,3", "--dry-run"]
    out = tmp_path / "bundle"
    res = CliRunner().invoke(main, common + ["-o", str(out), "--load-policy",
                                             "chain:3+suffix:2,3;chain:1+suffix:2,1"])
    assert res.exit_code == 0, res.output
    sc = yaml.safe_load((out / "model_repository/eagle_engine/1/model.yaml").read_text())["speculative_config"]
    assert sc["sa_config"] == {"threshold": 2, "enable_global_pool": False}
    assert sc["draft_len_schedule"] == {1: 3, 8: 1} and trtllm_problems(sc) == []
    refused = tmp_path / "refused"
    res = CliRunner().invoke(main, common + ["-o", str(refused), "--load-policy", "chain:3+suffix:2,3;none"])
    assert res.exit_code != 0 and "floored to 1 for SA-enhanced drafts" in res.output
    assert not refused.exists()


def test_suffix_needs_a_release_with_sa_config(tiny_base, eagle3_draft):
    """1.2's Eagle3DecodingConfig has no sa_config (it arrived in 1.3): refused there, pointing at 1.3."""
    with pytest.raises(EagleTrtError, match="sa_config arrived in 1.3") as err:
        create_spec(tiny_base, eagle3_draft, engine="llmapi", tree="chain:3+suffix:2,3", backend_version="1.2")
    assert "--backend-version 1.3" in err.value.hint
    assert "sa_config" not in llmapi_release("1.2").fields

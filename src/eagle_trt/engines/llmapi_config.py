"""The EAGLE-3 route: TensorRT-LLM's LLM API (PyTorch backend) runs EAGLE-3 drafts; it is the only TensorRT-LLM
route after 1.2 (docs/trtllm_formats.md §6, §7). We write its configuration as YAML (PyYAML) for Triton's LLM-API
model (`model.yaml`, read by the container's triton_backend/all_models/llmapi/tensorrt_llm/1/model.py) and for
`trtllm-serve --extra_llm_api_options` (`llm_api_options.yaml`).

`speculative_config` follows `Eagle3DecodingConfig` of the bundle's release line (`--backend-version` 1.2 / 1.3 / 1.4,
eagle_trt.engines.llmapi_release: only that release's fields are written, checked before anything is written):
  chain:N          -> max_draft_len: N
  static tree      -> eagle_choices: [[0], [1], [0, 0], ...], max_draft_len: its depth   (1.2, 1.3; 1.4 has no
                      static trees: refused with the nearest dynamic tree, validate_for_llmapi)
  dynamic:D,K,T    -> use_dynamic_tree: true, dynamic_tree_max_topK: K, max_draft_len: D+1, max_total_draft_tokens: T
  chain:N+suffix:M,N -> also sa_config: {threshold: M, enable_global_pool: false}   (SAEnhancerConfig, from 1.3)
  --load-policy P  -> draft_len_schedule: {1 and the last batch size of each run: its chain length (none: 0)}
                      (auto: not written - AUTO_TAIL was measured for the pytorch engine, not for TensorRT-LLM)
Never written: eagle3_one_model and num_eagle_layers (gone in 1.3 / 1.4; TensorRT-LLM derives them).
(Suffix candidates: TensorRT-LLM's SA overwrites the whole linear draft instead of adding a branch beside it, and
proposes max_draft_len tokens, so only chain:N+suffix:M,N maps (validate_for_llmapi). A load policy maps when
it starts with the bundle's tree and every entry is a chain or `none` with the same suffix threshold; `none` with
suffix candidates is refused: later TensorRT-LLM floors SA-enhanced drafts at 1 token. docs/trtllm_formats.md §6a.)
(TensorRT-LLM's max_draft_len is the number of drafter layers = tree levels; our D, like EAGLE's `depth`, counts
the expansions after the root's top-K, so the tree has D+1 levels: eagle3_dynamic_tree.py sizes its history
K + K*K*(max_draft_len-1), our pool K + D*K*K.)
Capture layers: TensorRT-LLM's `eagle3_layers_to_capture` counts layer OUTPUTS (default {1, L//2-1, L-4}); a
DraftSpec counts layer INPUTS (eagle_trt.draft_layouts: one rule for every layout) - the default three are the same
hidden states. We write the key only when the draft reads other layers, converted input -> output (index - 1).
"""

from __future__ import annotations

from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.engines.llmapi_release import LlmapiRelease, llmapi_release
from eagle_trt.load_policy import LoadPolicy
from eagle_trt.tree_config import AUTO, SUFFIX_MARK, Suffix, TreeConfig

MODEL_YAML = "model.yaml"
SERVE_YAML = "llm_api_options.yaml"


def trtllm_default_capture_outputs(num_layers: int) -> tuple[int, int, int]:
    """TensorRT-LLM's default eagle3_layers_to_capture: layer outputs {1, L//2-1, L-4} (llm_args.py)."""
    return 1, num_layers // 2 - 1, num_layers - 4


def layers_to_capture(capture_inputs: tuple[int, ...] | None, num_layers: int) -> list[int] | None:
    """`eagle3_layers_to_capture` for a draft that reads the inputs of `capture_inputs` (None: a draft that names
    none, the standard layers): None when TensorRT-LLM's default is already right, else the output indices (input
    index - 1)."""
    if capture_inputs is None:
        return None
    if any(i < 1 or i > num_layers for i in capture_inputs):
        raise EagleTrtError(f"the draft captures base layers {list(capture_inputs)}, which TensorRT-LLM cannot name "
                            f"(layer inputs 1..{num_layers} of a {num_layers}-layer base are the outputs 0.."
                            f"{num_layers - 1}; input 0, the embeddings, has no output index)",
                            "use --engine pytorch, or train the draft on the standard layers")
    outputs = sorted(i - 1 for i in capture_inputs)
    if tuple(outputs) == tuple(sorted(trtllm_default_capture_outputs(num_layers))):
        return None
    return outputs


def validate_for_llmapi(cfg: TreeConfig, release: LlmapiRelease) -> None:
    """Eagle3DecodingConfig's rules in TensorRT-LLM release line `release` (tensorrt_llm/llmapi/llm_args.py @
    00043967, docs/trtllm_formats.md §6, §6a). A static tree needs `eagle_choices` (gone from 1.4). A dynamic tree
    (validate_eagle_config): max_draft_len <= max_total_draft_tokens <= dynamic_tree_max_topK * max_draft_len, where
    its max_draft_len (drafter layers = tree levels) is our DEPTH + 1. Suffix candidates (`sa_config`, an
    SAEnhancerConfig, from 1.3): its threshold is our MIN_MATCH, but it has no token count: the enhancer overwrites the
    whole linear draft (max_draft_len tokens) when the match is long enough (_torch/speculative/sa_enhancer.py), and
    the dynamic-tree worker gets no suffix automaton at all (_torch/speculative/utils.py) - so only
    chain:N+suffix:M,N means on the LLM API what it means here."""
    if cfg.kind == "static" and not release.static_trees:
        tree = cfg.tree
        width = max(len(c) for c in tree.children())
        nearest = f"dynamic:{tree.depth - 1},{width},{min(tree.num_nodes, width * tree.depth)}" \
            if tree.depth > 1 else f"chain:{tree.depth}"
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM {release.version} has no static trees "
                            "(Eagle3DecodingConfig.eagle_choices was removed in 1.4)",
                            f"pass the nearest tree it runs, --tree {nearest} (the same depth, width and node count, "
                            f"chosen per step) or chain:{tree.depth}; or --backend-version 1.3 for this static tree")
    levels = cfg.depth + 1 if cfg.kind == "dynamic" else 0
    if cfg.kind == "dynamic" and not levels <= cfg.total_tokens <= cfg.top_k * levels:
        raise EagleTrtError(f"TensorRT-LLM's dynamic tree needs DEPTH+1 <= TOKENS <= TOPK x (DEPTH+1), got "
                            f"{cfg.to_arg()} ({levels} <= {cfg.total_tokens} <= {cfg.top_k * levels} fails)",
                            f"pass e.g. --tree dynamic:{cfg.depth},{cfg.top_k},{cfg.top_k * levels} or a chain:N")
    if cfg.suffix is None:
        return
    if not release.suffix:
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM {release.version} has no suffix automaton "
                            "(Eagle3DecodingConfig.sa_config arrived in 1.3)",
                            f"pass --backend-version 1.3 or newer, or drop {SUFFIX_MARK} from --tree")
    if cfg.kind != "chain":
        raise EagleTrtError(f"--tree {cfg.label()}: TensorRT-LLM's suffix automaton (sa_config) overwrites a linear "
                            f"draft of max_draft_len tokens; its dynamic-tree worker has no suffix automaton and a "
                            f"static tree drafts other nodes, so these candidates would be dropped or mean another "
                            f"thing",
                            f"use --tree chain:N{SUFFIX_MARK}:{cfg.suffix.min_match},N on --engine llmapi, or keep "
                            f"this tree on --engine pytorch")
    chain = cfg.tree.num_nodes
    if cfg.suffix.max_tokens != chain:
        fix = (f"--tree chain:{chain}{SUFFIX_MARK}:{cfg.suffix.min_match},{chain}" if chain <= Suffix.LIMIT else
               f"a chain of at most {Suffix.LIMIT} tokens")
        raise EagleTrtError(f"--tree {cfg.to_arg()}: TensorRT-LLM's suffix automaton (sa_config) proposes as many "
                            f"tokens as the draft (max_draft_len {chain}), not {cfg.suffix.max_tokens}: it has no "
                            f"knob for our TOKENS", f"pass {fix}")


def tree_fields(cfg: TreeConfig, release: LlmapiRelease) -> dict:
    """Our --tree value as Eagle3DecodingConfig fields of `release` (the module docstring has the table)."""
    validate_for_llmapi(cfg, release)
    sa = {} if cfg.suffix is None else {"sa_config": {"threshold": cfg.suffix.min_match, "enable_global_pool": False}}
    if cfg.kind == "chain":
        return {"max_draft_len": cfg.tree.num_nodes} | sa
    if cfg.kind == "static":
        return {"max_draft_len": cfg.tree.depth, "eagle_choices": cfg.tree.to_list()}
    return {"max_draft_len": cfg.depth + 1, "use_dynamic_tree": True, "dynamic_tree_max_topK": cfg.top_k,
            "max_total_draft_tokens": cfg.total_tokens}


def _scheduled_draft_len(entry: TreeConfig | None, tree: TreeConfig, batch: int, release: LlmapiRelease) -> int:
    """The draft length TensorRT-LLM can give a policy entry of a bundle drafting `tree` (a chain)."""
    where = f"load policy at batch size {batch}"
    if entry is None:
        if tree.suffix is not None:
            raise EagleTrtError(f"{where}: `none` with suffix candidates cannot be written for TensorRT-LLM: a "
                                "draft length of 0 in draft_len_schedule is floored to 1 for SA-enhanced drafts in "
                                "later releases (min_runtime_draft_len), which would draft where you asked for none",
                                f"use chain:1{SUFFIX_MARK}:{tree.suffix.min_match},1 there, or drop the suffix "
                                "candidates")
        return 0
    if entry.kind != "chain":
        raise EagleTrtError(f"{where}: {entry.label()} has no form in TensorRT-LLM's draft_len_schedule, which only "
                            "shortens the linear draft", "write the policy with chain:N entries and none")
    if (entry.suffix is None) != (tree.suffix is None) or (
            entry.suffix is not None and entry.suffix.min_match != tree.suffix.min_match):
        raise EagleTrtError(f"{where}: {entry.label()} has other suffix candidates than the bundle's {tree.label()}; "
                            "TensorRT-LLM has one sa_config for every batch size",
                            "give every chain entry the suffix threshold of --tree")
    validate_for_llmapi(entry, release)  # a chain with suffix candidates proposes its own length
    if entry.tree.num_nodes > tree.tree.num_nodes:
        raise EagleTrtError(f"{where}: {entry.label()} is longer than the bundle's {tree.label()}; "
                            "draft_len_schedule values must be <= max_draft_len",
                            f"build with --tree {entry.to_arg()} or shorten that entry")
    return entry.tree.num_nodes


def draft_len_schedule(policy: LoadPolicy, tree: TreeConfig, max_batch_size: int,
                       release: LlmapiRelease) -> dict[int, int] | None:
    """DecodingBaseConfig.draft_len_schedule for a load policy: {the largest batch size of each run of equal draft
    lengths: that length}, the last run ending at max_batch_size (TensorRT-LLM applies a key's value to batch sizes up
    to it and drafts 0 above the largest; ours holds the last entry for every larger batch). None when the policy
    drafts `tree` at every batch size up to max_batch_size."""
    entries = [policy.tree_for(batch) for batch in range(1, max_batch_size + 1)]
    if entries[0] != tree:
        raise EagleTrtError(f"load policy {policy.to_arg()!r} starts with "
                            f"{'none' if entries[0] is None else entries[0].label()}, the bundle drafts with "
                            f"{tree.label()}: TensorRT-LLM's draft_len_schedule maps the smallest batch size to "
                            "max_draft_len", f"start the policy with the --tree value, {tree.to_arg()}")
    if all(entry == tree for entry in entries):
        return None
    if tree.kind != "chain":
        raise EagleTrtError(f"load policy {policy.to_arg()!r}: TensorRT-LLM's draft_len_schedule only shortens a "
                            f"linear draft, and the bundle drafts the {tree.kind} tree {tree.label()}",
                            "build with --tree chain:N, or keep this policy on --engine pytorch")
    lengths = [_scheduled_draft_len(entry, tree, batch, release) for batch, entry in enumerate(entries, start=1)]
    schedule = {1: lengths[0]}  # key 1 = max_draft_len: the December 2025 validator (1.2) requires it, later ones allow it
    for batch, length in enumerate(lengths, start=1):
        if batch == len(lengths) or lengths[batch] != length:  # the run of `length` ends at `batch`
            schedule[batch] = length
    return schedule


def speculative_config(spec: BuildSpec, load_policy: str = AUTO) -> dict:
    """Eagle3DecodingConfig for the bundle's tree and its load policy (`auto`: no draft_len_schedule), with only the
    fields the bundle's TensorRT-LLM release has (it rejects any other: "Extra inputs are not permitted")."""
    release = llmapi_release(spec.backend_version)
    config = {"decoding_type": "Eagle3"} | tree_fields(spec.tree, release)
    if load_policy != AUTO:
        schedule = draft_len_schedule(LoadPolicy.parse(load_policy), spec.tree, spec.max_batch_size, release)
        if schedule is not None:
            config["draft_len_schedule"] = schedule
    config["speculative_model"] = str(spec.engine_draft_path)
    capture = layers_to_capture(spec.draft.capture_layers, spec.base.num_hidden_layers)
    if capture is not None:
        config["eagle3_layers_to_capture"] = capture
    unknown = sorted(set(config) - release.fields)
    if unknown:  # a field this release does not have would stop the server at load
        raise EagleTrtError(f"TensorRT-LLM {release.version}'s Eagle3DecodingConfig has no {', '.join(unknown)}",
                            "report this: eagle-trt wrote a field outside that release's set "
                            f"({release.source})")
    return config


def llmapi_options(spec: BuildSpec, speculative: bool = True, load_policy: str = AUTO) -> dict:
    """LLM() arguments; the base model's options are the same without speculative_config."""
    options = {"backend": "pytorch", "tensor_parallel_size": spec.tp_size, "pipeline_parallel_size": 1,
               "max_batch_size": spec.max_batch_size, "max_seq_len": spec.max_seq_len,
               "max_num_tokens": spec.max_num_tokens}
    if speculative and spec.draft is not None:
        options["speculative_config"] = speculative_config(spec, load_policy)
    return options


def model_yaml(spec: BuildSpec, speculative: bool = True, decoupled: bool = True, load_policy: str = AUTO) -> dict:
    """Triton LLM-API model.yaml: `model` + LLM() arguments + `triton_config` (max_batch_size 0: that model does
    not batch; decoupled: streaming)."""
    return {"model": str(spec.engine_base_path)} | llmapi_options(spec, speculative, load_policy) | {
        "triton_config": {"max_batch_size": 0, "decoupled": decoupled}}


def dump_yaml(data: dict) -> str:
    import yaml  # pyyaml: a core dependency

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def llmapi_config_files(spec: BuildSpec, speculative: bool = True, decoupled: bool = True,
                        load_policy: str = AUTO) -> dict[str, str]:
    """{file name: text}: model.yaml for Triton's LLM-API model, and llm_api_options.yaml for trtllm-serve."""
    return {MODEL_YAML: "# TensorRT-LLM LLM-API model (PyTorch backend), written by eagle-trt\n"
                        + dump_yaml(model_yaml(spec, speculative, decoupled, load_policy)),
            SERVE_YAML: f"# trtllm-serve {spec.engine_base_path} --backend pytorch --extra_llm_api_options "
                        f"{SERVE_YAML}\n" + dump_yaml(llmapi_options(spec, speculative, load_policy))}


def write_llmapi_config(spec: BuildSpec, path: Path, speculative: bool = True, decoupled: bool = True,
                        load_policy: str = AUTO) -> Path:
    """model.yaml at `path`, and llm_api_options.yaml for trtllm-serve beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for name, text in llmapi_config_files(spec, speculative, decoupled, load_policy).items():
        (path.parent / (path.name if name == MODEL_YAML else name)).write_text(text, encoding="utf-8")
    return path

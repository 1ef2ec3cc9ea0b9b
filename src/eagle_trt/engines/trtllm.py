"""`--engine trtllm`: TensorRT-LLM's TensorRT engine path (TensorRT-LLM <= 1.2): our converter writes the EAGLE
checkpoint (`EagleForCausalLM`, trtllm_checkpoint), `trtllm-build` builds the engines (trtllm_build), and Triton's
`tensorrtllm` backend serves them, its tensors named as the targeted backend release names them
(`--backend-version`, trtllm_backend). EAGLE-1/2 drafts on Llama bases; static trees only (`eagle_choices`).
docs/trtllm_formats.md has the formats.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from eagle_trt.build_spec import BuildSpec, TrtllmSettings
from eagle_trt.engines.engine import Artifacts, BuildMode, Engine, RequiredPath, ServingImage
from eagle_trt.engines.images import EAGLE_TRT_ON_TOP, TRTLLM_CONTAINERS, triton_image
from eagle_trt.engines.trtllm_backend import (DEFAULT_BACKEND_VERSION, BackendContract, backend_contract,
                                              parse_backend_version)
from eagle_trt.errors import EagleTrtError
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import (ACCEPTANCE_NAMES, ACCEPTANCE_TYPES, ENSEMBLES, add_acceptance_step,
                                               text_ensemble_config, text_models)
from eagle_trt.quantization import Quantization
from eagle_trt.spec import EAGLE_MODEL, DraftSpec, ModelSpec
from eagle_trt.tree import MAX_DRAFT_TOKENS, Tree
from eagle_trt.tree_config import SUFFIX_MARK, TreeConfig

_LLAMA_ONLY = ("the TensorRT-LLM engine path's EagleForCausalLM is its Llama model: it has no {what} "
               "(NVIDIA/TensorRT-LLM issues #10396, #2511)")
QUANTIZED_REFUSAL = ("TensorRT-LLM's EAGLE checkpoint converter (examples/eagle/convert_checkpoint.py, TensorRT-LLM <= "
                     "1.2) reads unquantized Hugging Face weights only, and eagle-trt writes no quantized TensorRT-LLM "
                     "checkpoint (dequantizing into an unquantized one would build another model than yours)")


class TrtllmEngine(Engine):
    name = "trtllm"
    label = "TensorRT-LLM engines (trtllm-build, TensorRT-LLM <= 1.2)"
    default_tree = "static:mc_sim_7b_63"  # TensorRT-LLM's own default (FasterDecoding/Medusa)
    family_refusals = {"mistral": _LLAMA_ONLY.format(what="Mistral sliding window"),
                       "qwen2": _LLAMA_ONLY.format(what="q/k/v biases"),
                       "qwen3": _LLAMA_ONLY.format(what="q/k RMSNorm")}
    releases = True
    dry_run_writes = True
    reads_draft = False  # the draft is converted into the EAGLE engine

    def draft_problems(self, draft: DraftSpec, backend_version: str | None = None) -> list[str]:
        if draft.format == "eagle3":
            return ["EAGLE-3 drafts are not supported by the TensorRT-LLM engine path (EAGLE-1/2 only)"]
        return self.missing_in_draft_model(draft, ["q/k/v biases in the draft layer"]
                                           if draft.qkv_bias or draft.o_bias else [])

    def quantization_refusal(self, quant: Quantization, backend_version: str | None = None) -> str | None:
        return QUANTIZED_REFUSAL if quant.method != "gguf" else "TensorRT-LLM does not read GGUF files"

    def check_tree(self, cfg: TreeConfig, backend_version: str | None) -> None:
        if cfg.suffix is not None:
            raise EagleTrtError(f"--tree {cfg.label()}: suffix candidates run on --engine pytorch and llmapi "
                                f"(TensorRT-LLM's sa_config), not trtllm", f"drop {SUFFIX_MARK} from --tree")
        if cfg.kind == "dynamic":
            raise EagleTrtError(f"the TensorRT-LLM engine (trtllm-build) needs a static tree, got {cfg.to_arg()}",
                                "pass a named tree, a JSON file or chain:N; dynamic trees run on --engine pytorch or "
                                "llmapi")

    def release(self, backend_version: str | None) -> str:
        version = backend_version or DEFAULT_BACKEND_VERSION
        parse_backend_version(version)
        return version

    def default_dtype(self, base: ModelSpec, device: str) -> str:
        return base.torch_dtype if base.torch_dtype in ("float16", "bfloat16") else "float16"

    def settings(self, tree: TreeConfig, max_draft_len: int | None = None, num_eagle_layers: int | None = None,
                 max_non_leaves_per_layer: int | None = None) -> TrtllmSettings:
        """The EAGLE sizes the engine is built with: by default from the bundle's tree (draft tokens, depth,
        non-leaf nodes per depth)."""
        return TrtllmSettings(tree.tree.num_nodes if max_draft_len is None else max_draft_len,
                              tree.tree.depth if num_eagle_layers is None else num_eagle_layers,
                              max(tree.tree.non_leaves_per_depth()) if max_non_leaves_per_layer is None
                              else max_non_leaves_per_layer)

    def spec_problems(self, spec: BuildSpec) -> list[str]:
        found = super().spec_problems(spec)
        sizes = spec.trtllm
        if sizes is None:
            return found + ["a trtllm bundle needs its engine sizes (max_draft_len, num_eagle_layers, "
                            "max_non_leaves_per_layer)"]
        bad = [f"{name} must be a positive integer, got {value!r}" for name, value in sizes.engine_sizes().items()
               if not isinstance(value, int) or value < 1]
        if bad:
            return found + bad
        if sizes.max_draft_len > MAX_DRAFT_TOKENS:
            found.append(f"max_draft_len {sizes.max_draft_len} > {MAX_DRAFT_TOKENS} (TRT-LLM's limit)")
        found += tree_breaches(spec.tree.tree, sizes)
        return found

    def acceptance_figures(self, spec: BuildSpec) -> bool:
        """The acceptance outputs and return_perf_metrics exist from backend 0.19 on."""
        return backend_contract(spec.backend_version).perf_metrics

    # ---- the bundle -------------------------------------------------------------------------------------------
    def plan_steps(self, spec: BuildSpec, mode: BuildMode) -> list[str]:
        return ["convert checkpoint (reused)" if mode.reuse_checkpoint else "convert checkpoint -> checkpoint/",
                "trtllm-build -> engines/eagle, engines/base" if mode.builds_engines else
                "trtllm-build command lines -> engines/build_engines.sh (not run)"]

    def build_artifacts(self, spec: BuildSpec, tmp: Path, out: Path, mode: BuildMode, serving) -> Artifacts:
        from eagle_trt.engines.trtllm_build import build_trtllm_engines
        from eagle_trt.kernels.trt_plugin import describe_plugin

        if mode.reuse_checkpoint and out.exists():
            shutil.copytree(out / "checkpoint", tmp / "checkpoint")
        result = build_trtllm_engines(spec, tmp, build=mode.builds_engines, reuse_checkpoint=mode.reuse_checkpoint)
        engines = tmp / "engines"
        engines.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(shlex.quote(a.replace(str(tmp), str(out))) for a in argv)
                 for argv in result.commands.values()]
        script = ["#!/usr/bin/env bash", "# trtllm-build for the EAGLE and the base engine (run inside the serving "
                  "container)", "set -euo pipefail", *lines]
        (engines / "build_engines.sh").write_text("\n".join(script) + "\n", encoding="utf-8")
        (engines / "build_engines.sh").chmod(0o755)
        (tmp / "plugins").mkdir(exist_ok=True)  # our tree-attention TensorRT plugin and how TensorRT picks it up
        (tmp / "plugins" / "tree_attention.json").write_text(json.dumps(describe_plugin(), indent=2) + "\n",
                                                             encoding="utf-8")
        return Artifacts(commands=[] if mode.builds_engines else lines, warnings=result.warnings)

    def repository(self, spec: BuildSpec, bundle_dir: Path, options: ServingOptions):
        configs, files = text_models(spec, bundle_dir, options)
        contract = backend_contract(spec.backend_version)
        for ensemble_name, engine_name in ENSEMBLES.items():
            speculative = ensemble_name == EAGLE_MODEL and spec.draft is not None
            engine_dir = bundle_dir / "engines" / ("eagle" if speculative else "base")
            configs[engine_name] = trtllm_engine_config(spec, options, engine_name, engine_dir, speculative, contract)
            configs[ensemble_name] = text_ensemble_config(
                spec, ensemble_name, engine_name, stream_key=False, seed_input=contract.seed_input,
                perf_metrics=contract.perf_metrics, acceptance_step=contract.perf_metrics)
            if contract.perf_metrics:
                add_acceptance_step(spec, ensemble_name, speculative, configs, files, input_types=ACCEPTANCE_TYPES,
                                    batched=True, count_output_tokens=True)
        return configs, files

    def image(self, spec: BuildSpec) -> ServingImage:
        release = parse_backend_version(spec.backend_version)
        if release not in TRTLLM_CONTAINERS:
            known = ", ".join(f"{a}.{b}" for a, b in TRTLLM_CONTAINERS)
            raise EagleTrtError(f"--backend-version {spec.backend_version}: no Triton container ships TensorRT-LLM "
                                f"{release[0]}.{release[1]}", f"pass one of the released versions: {known}")
        tag, exact = TRTLLM_CONTAINERS[release]
        base = triton_image(tag, "trtllm-python-")
        return ServingImage(image=base, base=base, derived=True, install=(EAGLE_TRT_ON_TOP,),
                            why=f"TensorRT-LLM {exact}, the release the engines must be built with "
                                f"(--backend-version {spec.backend_version}); derived image adds eagle-trt, which "
                                "the bundle's preprocessing, postprocessing and acceptance steps import")

    def required_paths(self, spec: BuildSpec, bundle: Path) -> list[RequiredPath]:
        """The engines (and, from the base directory, its tokenizer)."""
        return super().required_paths(spec, bundle) + [RequiredPath(f"{name} engine rank {rank}", bundle / "engines" / name / f"rank{rank}.engine",
                             "run OUT/engines/build_engines.sh in the serving image (the build skipped trtllm-build)")
                for name in ("eagle", "base") for rank in range(spec.tp_size)]

    def triton_ranks(self, spec: BuildSpec) -> int:
        return spec.tp_size  # the tensorrtllm backend runs one rank per GPU, one tritonserver per rank (MPI)


def tree_breaches(tree: Tree, sizes: TrtllmSettings) -> list[str]:
    """TRT-LLM's rules for eagle_choices (examples/eagle/README.md): depth == num_eagle_layers, nodes <=
    max_draft_len, non-leaf nodes per depth <= max_non_leaves_per_layer; each breach with its fix."""
    problems = []
    if tree.depth != sizes.num_eagle_layers:
        problems.append(f"tree depth {tree.depth} != num_eagle_layers {sizes.num_eagle_layers} (TRT-LLM needs them "
                        f"equal; pass --num-eagle-layers {tree.depth} or a tree of depth {sizes.num_eagle_layers})")
    if tree.num_nodes > sizes.max_draft_len:
        problems.append(f"tree has {tree.num_nodes} nodes > max_draft_len {sizes.max_draft_len} "
                        f"(pass --max-draft-len {tree.num_nodes} or a smaller tree)")
    worst = max(tree.non_leaves_per_depth())
    if worst > sizes.max_non_leaves_per_layer:
        problems.append(f"tree has {worst} non-leaf nodes at one depth > max_non_leaves_per_layer "
                        f"{sizes.max_non_leaves_per_layer} (pass --max-non-leaves-per-layer {worst})")
    return problems


def trtllm_engine_config(spec: BuildSpec, options: ServingOptions, name: str, engine_dir: Path, speculative: bool,
                         contract: BackendContract) -> dict:
    """The tensorrtllm backend model (parameters per docs/trtllm_formats.md §4), its tensors as the targeted
    backend release names them (trtllm_backend)."""
    parameters = {
        "max_beam_width": 1,
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": engine_dir,
        "batch_scheduler_policy": "guaranteed_no_evict",
        "kv_cache_free_gpu_mem_fraction": options.kv_cache_free_gpu_mem_fraction,
        "enable_kv_cache_reuse": options.enable_kv_cache_reuse,
        "enable_chunked_context": False,
        "exclude_input_in_output": options.exclude_input_in_output,
        "normalize_log_probs": True,
        "multi_block_mode": False,
        "cuda_graph_mode": False,
    }
    if speculative:
        parameters["decoding_mode"] = "eagle"
        parameters["eagle_choices"] = spec.tree.tree.to_brace()
    engine_inputs = [
        C.tensor(n, t, d, o, **({"allow_ragged_batch": True} if n == "input_ids" else
                                {"reshape": {"shape": []}} if d == [1] else {}))
        for n, t, d, o in _inputs(contract)
    ]
    return {
        "name": name, "backend": "tensorrtllm", "max_batch_size": spec.max_batch_size,
        "model_transaction_policy": {"decoupled": options.decoupled},
        "dynamic_batching": {
            "preferred_batch_size": [spec.max_batch_size],
            "max_queue_delay_microseconds": options.max_queue_delay_us,
            "default_queue_policy": {"max_queue_size": options.max_queue_size},
        },
        "input": engine_inputs,
        "output": C.outputs(tuple(t for t in C.ENGINE_OUTPUTS if contract.perf_metrics or t[0] not in ACCEPTANCE_NAMES)
                            + ((C.ARRIVAL_TIME_OUTPUT,) if contract.perf_metrics else ())),
        "instance_group": C.instance_group("KIND_CPU", 1),  # one rank per GPU via MPI, not instances
        "parameters": C.params(parameters),
    }


def _inputs(contract: BackendContract):
    for n, t, d, o in C.ENGINE_INPUTS:
        if n == "return_perf_metrics" and not contract.perf_metrics:
            continue
        yield (contract.seed_input if n == "seed" else n), t, d, o


TRTLLM = TrtllmEngine()

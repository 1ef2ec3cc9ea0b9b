"""`--engine pytorch`: our EAGLE runtime (eagle_trt.runtime) in a Triton python-backend model, on the CPU or a GPU.

It runs every family, draft layout, tree and quantization scheme eagle-trt reads (a quantized base dequantized
exactly at load), in float32 / float16 / bfloat16 or, on the CPU, int8 linears; it is the oracle the other engines
are checked against. Its serving image is NVIDIA's plain Triton image with torch and eagle-trt added.
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines.engine import Engine, ServingImage
from eagle_trt.engines.images import NEWEST_TRITON, triton_image
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import (ENSEMBLES, python_model_source, spec_parameter, text_ensemble_config,
                                               text_models)
from eagle_trt.spec import CPU_PRECISIONS, EAGLE_MODEL, NATIVE_PRECISIONS, ModelSpec
from eagle_trt.tree_config import DEFAULT_RUNTIME_TREE



class PytorchEngine(Engine):
    name = "pytorch"
    label = "our PyTorch EAGLE engine (Triton python backend)"
    default_tree = DEFAULT_RUNTIME_TREE
    startup_budget_s = 600
    tunes_trees = True

    def default_dtype(self, base: ModelSpec, device: str) -> str:
        if device == "cpu":
            if base.weight_format == "gguf" and native_runs(base):
                return "native"  # the file's blocks as stored: what the dequantized weights compute, 2.5x int8
            return "float32"  # CPU matmuls in half precision are slow and lossy; fp32 is the oracle's dtype
        return super().default_dtype(base, device)

    def spec_problems(self, spec: BuildSpec) -> list[str]:
        found = []
        if spec.tp_size != 1:
            found.append("the pytorch engine runs on one device: tp_size must be 1")
        if spec.dtype in CPU_PRECISIONS and spec.device != "cpu":
            found.append(f"dtype {spec.dtype} is the pytorch engine's CPU mode (device {spec.device}): use "
                         "float16/bfloat16 on a GPU")
        return found

    def uses_gpu(self, spec: BuildSpec) -> bool:
        return spec.device == "cuda"

    def load_settings(self, bundle: Path) -> dict[str, str]:
        """eagle_engine's trees by batch size and its backoff, as its config.pbtxt records them."""
        config = bundle / "model_repository" / ENSEMBLES[EAGLE_MODEL] / "config.pbtxt"
        params = {k: v.string_value for k, v in C.parse(config.read_text()).parameters.items()}
        if "load_policy" not in params:  # a bundle from before load policies: one tree at every load
            return {}
        backoff = ("each request alone and every batch" if params.get("backoff") == "true" else
                   "batches of 2 or more" if params.get("batch_backoff") == "true" else "off")
        return {"load_policy": LoadPolicy.from_list(json.loads(params["load_policy"])).to_arg(), "backoff": backoff}

    def repository(self, spec: BuildSpec, bundle_dir: Path, options: ServingOptions):
        configs, files = text_models(spec, bundle_dir, options)
        for ensemble_name, engine_name in ENSEMBLES.items():
            speculative = ensemble_name == EAGLE_MODEL and spec.draft is not None
            configs[engine_name] = python_engine_config(spec, bundle_dir, options, engine_name, speculative)
            files[f"{engine_name}/1/model.py"] = python_model_source("engine.py")
            files[f"{engine_name}/1/model_params.py"] = python_model_source("model_params.py")
            configs[ensemble_name] = text_ensemble_config(spec, ensemble_name, engine_name, stream_key=True,
                                                          cached_tokens=True)
        return configs, files

    def image(self, spec: BuildSpec) -> ServingImage:
        base = triton_image(NEWEST_TRITON)
        # torch: the CUDA wheel for device cuda; a CPU build is enough for device cpu
        return ServingImage(image=base, base=base, derived=True,
                            why="Triton's python backend, which runs eagle_trt's engine model; derived image adds "
                                "torch and eagle-trt (python models)",
                            install=('RUN python3 -m pip install --no-cache-dir torch "/opt/eagle-trt[runtime]" '
                                     'aiohttp',))


def python_engine_config(spec: BuildSpec, bundle_dir: Path, options: ServingOptions, name: str,
                         speculative: bool) -> dict:
    """Our runtime in a decoupled python model; eagle_engine and base_engine share model.py, which builds its
    decoder from the bundle's spec (EagleDecoder.from_bundle); the parameters add only the serving knobs."""
    engine_inputs = C.inputs(C.ENGINE_INPUTS + (C.STREAM_KEY_INPUT,))
    engine_outputs = C.outputs(C.ENGINE_OUTPUTS + C.STREAM_KEY_OUTPUTS + (C.CACHED_PROMPT_TOKENS,))
    load_policy = LoadPolicy((None,))  # the base engine decodes plainly
    if speculative:
        load_policy = resolve_load_policy(spec.tree, options.load_policy, spec.dtype in NATIVE_PRECISIONS)
    return C.python_model(
        name, spec.max_batch_size, engine_inputs, engine_outputs,
        spec_parameter(bundle_dir) | {
            "speculative": speculative,  # eagle_engine; base_engine decodes plainly
            # eagle_engine and base_engine run side by side: each takes its share of the cores unless told
            "threads": options.engine_threads,
            "engines_sharing": options.engines_sharing,
            # the tree by how many requests run at once (runtime.batching)
            "load_policy": json.dumps(load_policy.to_list(), separators=(",", ":")),
            # plain steps where they are faster (runtime.backoff): a request alone unless `batches` or `off` (its
            # tree was tuned on calibration prompts; judged with a margin it kept the tree's gain where the tree
            # pays, docs/native_cpu.md, Backoff); a batch of 2 or more unless `off` (the load policy's tail was
            # measured on calibration prompts too; docs/load.md, "The batch backs off")
            "backoff": speculative and options.backoff in ("auto", "on"),
            "batch_backoff": speculative and options.backoff != "off",
            # a request continuing a finished one prefills only what is new (runtime.prefix); "false" turns it off
            "prefix_reuse": True,
        },
        instances=options.engine_instances, decoupled=True,
    )


def native_runs(base: ModelSpec) -> bool:
    """Whether precision native runs this base on this machine (its layers and the CPU)."""
    from eagle_trt.kernels.cpu_build import cpu_supports_native
    from eagle_trt.runtime.model import LlamaArgs
    from eagle_trt.runtime.native import native_refusal

    return cpu_supports_native() is None and native_refusal(LlamaArgs.from_spec(base)) is None


PYTORCH = PytorchEngine()

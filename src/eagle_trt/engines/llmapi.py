"""`--engine llmapi`: TensorRT-LLM's LLM API (its PyTorch backend) behind Triton's LLM-API python model, the only
TensorRT-LLM route after 1.2, for EAGLE-3 drafts. The bundle holds each engine model's `model.yaml` (LLM()
arguments with the release's Eagle3DecodingConfig, llmapi_config) and the release line it targets
(`--backend-version` 1.2 / 1.3 / 1.4, llmapi_release). TensorRT-LLM reads the base and draft directories itself:
a quantized base passes through unchanged, a draft in another layout is given as a copy it reads.
"""

from __future__ import annotations

from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines.engine import Artifacts, BuildMode, Engine, RequiredPath, ServingImage
from eagle_trt.engines.images import EAGLE_TRT_ON_TOP, NEWEST_TRITON, TRTLLM_CONTAINERS, TRTLLM_WHEELS, triton_image
from eagle_trt.engines.llmapi_config import MODEL_YAML, llmapi_config_files, speculative_config, validate_for_llmapi
from eagle_trt.engines.llmapi_release import LlmapiRelease, llmapi_release
from eagle_trt.engines.quantized import llmapi_refusal
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import (ACCEPTANCE_INTERNAL, ACCEPTANCE_STEP_OUTPUTS, ACCEPTANCE_STEPS,
                                               ENSEMBLES, add_acceptance_step)
from eagle_trt.quantization import Quantization
from eagle_trt.spec import EAGLE_MODEL, DraftSpec, ModelSpec
from eagle_trt.tree_config import TreeConfig

_TWO_MODEL = ("TensorRT-LLM's {model} is not a SpecDecOneEngineForCausalLM: it runs EAGLE-3 only in two-model mode, "
              "deprecated in 1.x and ignored on its main branch (tensorrt_llm/llmapi/llm_args.py)")
# the LLM-API python model as the TensorRT-LLM Triton container ships it (model.py imports helpers.py beside it)
LLMAPI_MODEL_DIR = Path("/app/all_models/llmapi/tensorrt_llm/1")
LLMAPI_MODEL_FILES = ("model.py", "helpers.py")
# (name, data_type, dims, optional) of the LLM-API model's request; the sampling_param_* are SamplingParams fields
LLMAPI_INPUTS = (
    ("text_input", "TYPE_STRING", [-1], False),
    ("streaming", "TYPE_BOOL", [1], True),
    ("sampling_param_temperature", "TYPE_FP32", [1], True),
    ("sampling_param_top_k", "TYPE_INT32", [1], True),
    ("sampling_param_top_p", "TYPE_FP32", [1], True),
    ("sampling_param_max_tokens", "TYPE_INT32", [1], True),
    ("sampling_param_stop", "TYPE_STRING", [-1], True),
    ("sampling_param_seed", "TYPE_UINT64", [1], True),
    ("sampling_param_exclude_input_from_output", "TYPE_BOOL", [1], True),
    ("sampling_param_return_perf_metrics", "TYPE_BOOL", [1], True),
    ("return_finish_reason", "TYPE_BOOL", [1], True),
)
# LLM-API input <- the tensorrtllm ensemble's request name (the interface of eagle_model / base_model)
LLMAPI_FROM_ENSEMBLE = {
    "text_input": "text_input", "streaming": "stream", "sampling_param_max_tokens": "max_tokens",
    "sampling_param_temperature": "temperature", "sampling_param_top_k": "top_k", "sampling_param_top_p": "top_p",
    "sampling_param_seed": "seed", "sampling_param_stop": "stop_words",
    "sampling_param_return_perf_metrics": "return_perf_metrics",
    "sampling_param_exclude_input_from_output": "exclude_input_in_output",
}


class LlmapiEngine(Engine):
    name = "llmapi"
    label = "TensorRT-LLM's LLM API (PyTorch backend), Triton's LLM-API model"
    default_tree = "chain:3"  # TensorRT-LLM's EAGLE-3 examples; its static trees are gone in 1.4
    family_refusals = {"mistral": _TWO_MODEL.format(model="MistralForCausalLM"),
                       "qwen2": _TWO_MODEL.format(model="Qwen2ForCausalLM")}
    reads_hf_directories = True
    takes_messages = False  # the LLM-API model takes text_input only
    cumulative_text = True  # a streamed text_output is CompletionOutput.text: the text so far
    releases = True
    dry_run_writes = True

    def draft_problems(self, draft: DraftSpec, backend_version: str | None = None) -> list[str]:
        if draft.format == "eagle1":
            return ["TRT-LLM's LLM-API (PyTorch backend) runs EAGLE-3 drafts only"]
        missing = []
        if draft.qk_norm:
            missing.append("q/k RMSNorm in the draft layer (a Qwen3-type layer)")
        if draft.norm_before_residual:
            missing.append("norm_before_residual (TensorRT-LLM takes the layer's residual before hidden_norm)")
        if draft.input_norm:
            missing.append("norm_before_fc (an RMSNorm over the captured states before fc)")
        release = llmapi_release(backend_version)
        if (draft.fc_norm or draft.norm_output) and not release.draft_norms:
            switches = " / ".join(k for k in ("fc_norm", "norm_output") if getattr(draft, k))
            missing.append(f"{switches} (EAGLE 3.1 norms, read from the draft's config from TensorRT-LLM 1.4 on, "
                           f"PR #14988; this bundle targets {release.version}: pass --backend-version 1.4)")
        return self.missing_in_draft_model(draft, missing)

    def quantization_refusal(self, quant: Quantization, backend_version: str | None = None) -> str | None:
        return llmapi_refusal(quant, llmapi_release(backend_version))

    def check_tree(self, cfg: TreeConfig, backend_version: str | None) -> None:
        validate_for_llmapi(cfg, llmapi_release(backend_version))

    def release(self, backend_version: str | None) -> str:
        return llmapi_release(backend_version).version

    def default_dtype(self, base: ModelSpec, device: str) -> str:
        return super().default_dtype(base, device)

    # ---- the bundle -------------------------------------------------------------------------------------------
    def served_draft_change(self, draft: DraftSpec | None) -> str | None:
        """TensorRT-LLM's Eagle3 draft model loads `midlayer.*` from a flat Llama config (its renaming of
        `layers.0.*` arrived in January 2026, after 1.2): Model-Optimizer and speculators drafts get a copy."""
        if draft is not None and draft.format == "eagle3" and draft.layout in ("modelopt", "speculators"):
            return (f"TensorRT-LLM reads EAGLE-3 drafts as midlayer.* with a flat Llama config, not the {draft.layout} "
                    "layout")
        return None

    def served_draft_config(self, draft: DraftSpec) -> dict:
        """SafeAILab's EAGLE-3 config: a flat `LlamaForCausalLM` with `draft_vocab_size`, `target_hidden_size`, and
        the `fc_norm` / `norm_output` switches TensorRT-LLM's draft model reads."""
        from eagle_trt.draft_layouts import one_layer_llama_config

        cfg = one_layer_llama_config(draft, rms_norm_eps=draft.rms_norm_eps, rope_theta=draft.rope_theta,
                                     max_position_embeddings=draft.max_position_embeddings,
                                     rope_scaling=draft.rope_scaling,
                                     draft_vocab_size=draft.draft_vocab_size or draft.vocab_size,
                                     attention_bias=draft.qkv_bias, mlp_bias=draft.mlp_bias)
        if draft.target_hidden_size:
            cfg["target_hidden_size"] = draft.target_hidden_size
        cfg |= {k: True for k in ("fc_norm", "norm_output") if getattr(draft, k)}
        return cfg | {"eagle_trt_source": {"path": str(draft.path), "layout": draft.layout}}

    def served_draft_name(self, draft: DraftSpec, name: str) -> str:
        return "midlayer." + name[len(draft.prefix):] if name.startswith(draft.prefix) else name

    def check_serving(self, spec: BuildSpec, serving: ServingOptions) -> None:
        if spec.draft is not None:
            speculative_config(spec, serving.load_policy)  # a policy TensorRT-LLM cannot express stops before work

    def plan_steps(self, spec: BuildSpec, mode: BuildMode) -> list[str]:
        return [f"LLM-API config -> model_repository/{{eagle,base}}_engine/1/{MODEL_YAML}"]

    def build_artifacts(self, spec: BuildSpec, tmp: Path, out: Path, mode: BuildMode, serving) -> Artifacts:
        return Artifacts(config=out / "model_repository" / ENSEMBLES[EAGLE_MODEL] / "1" / MODEL_YAML)

    def repository(self, spec: BuildSpec, bundle_dir: Path, options: ServingOptions):
        """The LLM-API models and their model.yaml, the ensembles mapping the tensorrtllm request names onto them,
        and the acceptance steps (the LLM-API model has its own tokenizer: no pre/postprocessing)."""
        release = llmapi_release(spec.backend_version)
        types = perf_output_types(release)
        configs, files = {}, {}
        for ensemble_name, engine_name in ENSEMBLES.items():
            speculative = ensemble_name == EAGLE_MODEL and spec.draft is not None
            configs[engine_name] = llmapi_engine_config(engine_name, options, types)
            configs[ensemble_name] = llmapi_ensemble_config(ensemble_name, engine_name)
            add_acceptance_step(spec, ensemble_name, speculative, configs, files, input_types=types, batched=False,
                                count_output_tokens=False)
            if all((LLMAPI_MODEL_DIR / f).is_file() for f in LLMAPI_MODEL_FILES):
                files.update({f"{engine_name}/1/{f}": LLMAPI_MODEL_DIR / f for f in LLMAPI_MODEL_FILES})
            files[f"{engine_name}/1/README.md"] = _README
            for name, text in llmapi_config_files(spec, speculative=speculative, decoupled=options.decoupled,
                                                  load_policy=options.load_policy).items():
                files[f"{engine_name}/1/{name}"] = text
        return configs, files

    def image(self, spec: BuildSpec) -> ServingImage:
        release = llmapi_release(spec.backend_version)
        if release.line in TRTLLM_CONTAINERS:
            tag, exact = TRTLLM_CONTAINERS[release.line]
            base = triton_image(tag, "trtllm-python-")
            return ServingImage(image=base, base=base, derived=True, install=(EAGLE_TRT_ON_TOP,),
                                why=f"TensorRT-LLM {exact} with its LLM-API Triton model; derived image adds "
                                    "eagle-trt, which the bundle's acceptance steps import")
        base = triton_image(NEWEST_TRITON, "trtllm-python-")
        install = (f'RUN python3 -m pip install --no-cache-dir --extra-index-url {TRTLLM_WHEELS} '
                   f'"tensorrt_llm=={release.exact}"',
                   f"RUN git clone --depth 1 --branch v{release.exact} https://github.com/NVIDIA/TensorRT-LLM.git "
                   "/tmp/trtllm && rm -rf /app/all_models/llmapi && mkdir -p /app/all_models && "
                   "cp -r /tmp/trtllm/triton_backend/all_models/llmapi /app/all_models/llmapi && rm -rf /tmp/trtllm",
                   EAGLE_TRT_ON_TOP)
        return ServingImage(image=base, base=base, derived=True, install=install,
                            tag=f"{NEWEST_TRITON}-trtllm-python-py3-trtllm{release.exact}",
                            why=f"no Triton container ships TensorRT-LLM {release.version}: the derived image installs "
                                f"{release.exact} and its LLM-API Triton model (--backend-version {release.version})")

    def required_paths(self, spec: BuildSpec, bundle: Path) -> list[RequiredPath]:
        return super().required_paths(spec, bundle) + [
            RequiredPath(f"{model} LLM-API {name}", bundle / "model_repository" / model / "1" / name,
                         f"copy it from {LLMAPI_MODEL_DIR} in the serving image into the bundle")
            for model in ENSEMBLES.values() for name in LLMAPI_MODEL_FILES]


def perf_output_types(release: LlmapiRelease) -> dict[str, str]:
    """{perf-metrics output: the Triton type the LLM-API model really sends}: BYTES holding the numbers' text where its
    model.py builds them with text_output's dtype (llmapi_release), whatever its config.pbtxt declares."""
    outputs = C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)
    return {name: "TYPE_STRING" if release.perf_outputs_bytes else data_type for name, data_type, _ in outputs}


def llmapi_engine_config(name: str, options: ServingOptions, types: dict[str, str]) -> dict:
    """TensorRT-LLM's LLM-API python model (triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt: the inputs
    and outputs we use, same names; the perf-metrics outputs typed as its model.py really builds them, so the
    ensemble can pass them to the acceptance step); model.yaml beside model.py configures it."""
    ins = C.inputs(LLMAPI_INPUTS)
    outs = C.outputs((("text_output", "TYPE_STRING", [-1]), ("finish_reason", "TYPE_STRING", [-1]))
                     + tuple((n, types[n], d) for n, _, d in C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)))
    return {"name": name, "backend": "python", "max_batch_size": 0, "input": ins, "output": outs,
            "model_transaction_policy": {"decoupled": options.decoupled},
            "instance_group": C.instance_group("KIND_CPU", 1)}


def llmapi_ensemble_config(name: str, engine_name: str) -> dict:
    """The tensorrtllm request names mapped onto the LLM-API model's inputs; text back, and the acceptance outputs
    through the acceptance step."""
    used = set(LLMAPI_FROM_ENSEMBLE.values())
    theirs = {ours: name for name, ours in LLMAPI_FROM_ENSEMBLE.items()}
    llmapi = {n: (t, o) for n, t, _, o in LLMAPI_INPUTS}
    ins = [C.tensor(n, llmapi[theirs[n]][0], d, o and llmapi[theirs[n]][1])  # its types: max_tokens is INT32
           for n, _, d, o in C.ENSEMBLE_INPUTS if n in used]
    outputs = {"text_output": "text_output"} | ACCEPTANCE_INTERNAL
    steps = [C.step(engine_name, LLMAPI_FROM_ENSEMBLE, outputs),
             C.step(ACCEPTANCE_STEPS[name], ACCEPTANCE_INTERNAL, ACCEPTANCE_STEP_OUTPUTS)]
    return C.ensemble(name, 0, ins, C.outputs(t for t in C.ENSEMBLE_OUTPUTS if t != C.OUTPUT_TOKEN_COUNT), steps)


_README = """This model is TensorRT-LLM's LLM-API python model (PyTorch backend; the only TensorRT-LLM route for EAGLE
after 1.2, and EAGLE-3 drafts only). model.yaml beside this file was written by `eagle-trt build` from the bundle's
spec: `triton_config` goes to Triton, every other key to tensorrt_llm.LLM(); eagle_engine's holds the
speculative_config, base_engine's the same without it.

Serve it inside a Triton TensorRT-LLM container (nvcr.io/nvidia/tritonserver:<yy.mm>-trtllm-python-py3), which
ships the model code; copy it next to model.yaml in both engine models (model.py imports helpers.py):
    for m in eagle_engine base_engine; do
      cp /app/all_models/llmapi/tensorrt_llm/1/model.py /app/all_models/llmapi/tensorrt_llm/1/helpers.py \\
         model_repository/$m/1/
    done
    tritonserver --model-repository model_repository --model-control-mode explicit \\
        --load-model eagle_model --load-model base_model

eagle_model / base_model take the tensorrtllm request names (text_input, max_tokens, stream, temperature, top_k,
top_p, seed, stop_words, return_perf_metrics, exclude_input_in_output) and pass them on as text_input, streaming,
sampling_param_max_tokens, ..., sampling_param_return_perf_metrics. The engine models can also be called directly
with those names. With return_perf_metrics the answer carries acceptance_rate, total_accepted_draft_tokens and
total_draft_tokens. When streaming, each text_output of this model is the text so far (the LLM API's
CompletionOutput.text), not the new piece: `eagle-trt perf run` and the client
(eagle_trt.client.triton.generate(..., cumulative=True)) take that into account.
"""

LLMAPI = LlmapiEngine()

"""Write OUT/model_repository for one engine kind from a saved BuildSpec.

```
model_repository/
  eagle_model/   ensemble: text_input, max_tokens, stream, ... -> text_output + acceptance outputs
  base_model/    the same ensemble around the plain engine (for the comparison)
  preprocessing/ python: chat template (optional), tokenize, end/pad/stop ids, request validation
  postprocessing/ python: incremental detokenization
  eagle_engine/  pytorch: python model running eagle_trt.runtime | trtllm: tensorrtllm backend | llmapi: LLM-API
  base_engine/   the same without speculation
  eagle_acceptance/, base_acceptance/  trtllm (with acceptance outputs) and llmapi: python step after the engine
                 that passes the acceptance outputs through and counts them on the metrics port
```
For `vllm` the repository is the vLLM backend's (Triton's speculative-decoding tutorial): eagle_model/ and
base_model/ each with `1/model.json`. Every value shared between models (max_batch_size, lengths, paths, the
tree) comes from the spec; serving knobs come from `ServingOptions`.
"""

from __future__ import annotations

import json
import logging
import shutil
from importlib import resources
from pathlib import Path

from eagle_trt.backend import BackendContract, backend_contract
from eagle_trt.llmapi_release import LlmapiRelease, llmapi_release
from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.load_policy import LoadPolicy, resolve_load_policy
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL, ENGINES

log = logging.getLogger(__name__)

ENSEMBLES = {EAGLE_MODEL: "eagle_engine", BASE_MODEL: "base_engine"}
# trtllm / llmapi: the python step counting each ensemble's acceptance outputs (python_models/acceptance_step.py)
ACCEPTANCE_STEPS = {EAGLE_MODEL: "eagle_acceptance", BASE_MODEL: "base_acceptance"}
# the LLM-API python model as the TensorRT-LLM Triton container ships it (model.py imports helpers.py beside it)
LLMAPI_MODEL_DIR = Path("/app/all_models/llmapi/tensorrt_llm/1")
LLMAPI_MODEL_FILES = ("model.py", "helpers.py")


def write_model_repository(spec: BuildSpec, repo_dir: str | Path, *, bundle_dir: str | Path,
                           options: ServingOptions | None = None) -> list[str]:
    """Write every model of the repository; returns the model names. `bundle_dir` is the bundle's final path
    (engine directories and the spec are referenced by absolute path from there)."""
    options = options or ServingOptions()
    options.validate()
    repo_dir, bundle_dir = Path(repo_dir), Path(bundle_dir).resolve()
    repo_dir.mkdir(parents=True, exist_ok=True)
    configs, files = model_configs(spec, bundle_dir, options)
    for name, fields in configs.items():
        model_dir = repo_dir / name
        (model_dir / "1").mkdir(parents=True, exist_ok=True)
        (model_dir / "config.pbtxt").write_text(C.render(C.build(fields)))
    for rel_path, content in files.items():
        path = repo_dir / rel_path
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, path)
        else:
            path.write_text(content)
    return sorted(configs)


def model_configs(spec: BuildSpec, bundle_dir: Path,
                  options: ServingOptions) -> tuple[dict[str, dict], dict[str, object]]:
    """(model name -> config fields, relative path -> file text or source Path) for the spec's engine kind."""
    if spec.engine == "vllm":
        return _vllm(spec)
    configs: dict[str, dict] = {
        "preprocessing": preprocessing_config(spec, options),
        "postprocessing": postprocessing_config(spec, options),
    }
    files: dict[str, object] = {
        "preprocessing/1/model.py": python_model_source("preprocessing.py"),
        "preprocessing/1/model_params.py": python_model_source("model_params.py"),
        "postprocessing/1/model.py": python_model_source("postprocessing.py"),
        "postprocessing/1/model_params.py": python_model_source("model_params.py"),
    }
    for ensemble_name, engine_name in ENSEMBLES.items():
        speculative = ensemble_name == EAGLE_MODEL and spec.draft is not None
        if spec.engine == "pytorch":
            configs[engine_name] = python_engine_config(spec, options, engine_name, speculative)
            files[f"{engine_name}/1/model.py"] = python_model_source("engine.py")
            files[f"{engine_name}/1/model_params.py"] = python_model_source("model_params.py")
            configs[ensemble_name] = text_ensemble_config(spec, ensemble_name, engine_name, stream_key=True)
        elif spec.engine == "trtllm":
            engine_dir = bundle_dir / "engines" / ("eagle" if speculative else "base")
            contract = backend_contract(spec.trtllm.backend_version)
            configs[engine_name] = trtllm_engine_config(spec, options, engine_name, engine_dir, speculative,
                                                        contract)
            configs[ensemble_name] = text_ensemble_config(spec, ensemble_name, engine_name, stream_key=False,
                                                          contract=contract)
            if contract.perf_metrics:
                _add_acceptance_step(spec, ensemble_name, speculative, configs, files)
        elif spec.engine == "llmapi":
            configs[engine_name] = llmapi_engine_config(engine_name, options, llmapi_release(spec.llmapi_version))
            configs[ensemble_name] = llmapi_ensemble_config(ensemble_name, engine_name)
            _add_acceptance_step(spec, ensemble_name, speculative, configs, files)
            if all((LLMAPI_MODEL_DIR / f).is_file() for f in LLMAPI_MODEL_FILES):
                files.update({f"{engine_name}/1/{f}": LLMAPI_MODEL_DIR / f for f in LLMAPI_MODEL_FILES})
            files[f"{engine_name}/1/README.md"] = _LLMAPI_README
        else:
            raise EagleTrtError(f"unknown engine kind {spec.engine!r}", f"use one of {', '.join(ENGINES)}")
    if spec.engine == "llmapi":  # the LLM-API path has its own tokenizer inside the model
        del configs["preprocessing"], configs["postprocessing"]
        for name in ("preprocessing", "postprocessing"):
            del files[f"{name}/1/model.py"], files[f"{name}/1/model_params.py"]
    return configs, files


def _add_acceptance_step(spec: BuildSpec, ensemble_name: str, speculative: bool, configs: dict, files: dict) -> None:
    """The ensemble's acceptance step (trtllm, llmapi): its config and model files."""
    step_name = ACCEPTANCE_STEPS[ensemble_name]
    configs[step_name] = acceptance_step_config(spec, ensemble_name, speculative)
    files[f"{step_name}/1/model.py"] = python_model_source("acceptance_step.py")
    files[f"{step_name}/1/model_params.py"] = python_model_source("model_params.py")


def python_model_source(filename: str) -> Path:
    return Path(str(resources.files("eagle_trt.model_repository.python_models") / filename))


# ---- text models ------------------------------------------------------------------------------------------------
def preprocessing_config(spec: BuildSpec, options: ServingOptions) -> dict:
    return C.python_model(
        "preprocessing", spec.max_batch_size, C.inputs(C.PREPROCESSING_INPUTS), C.outputs(C.PREPROCESSING_OUTPUTS),
        {
            "tokenizer_dir": spec.base.path,
            "chat_template": spec.chat_template,
            "end_ids": ",".join(str(i) for i in spec.base.eos_token_ids),
            "max_input_len": spec.max_input_len,
            "max_seq_len": spec.max_seq_len,
            "add_special_tokens": True,
        },
        instances=options.preprocessing_instances,
    )


def postprocessing_config(spec: BuildSpec, options: ServingOptions) -> dict:
    return C.python_model(
        "postprocessing", spec.max_batch_size, C.inputs(C.POSTPROCESSING_INPUTS), C.outputs(C.POSTPROCESSING_OUTPUTS),
        {"tokenizer_dir": spec.base.path, "skip_special_tokens": True},
        instances=options.postprocessing_instances,
    )


def text_ensemble_config(spec: BuildSpec, name: str, engine_name: str, *, stream_key: bool,
                         contract: BackendContract | None = None) -> dict:
    """The tensorrtllm-style ensemble: preprocessing -> engine -> postprocessing. `contract` (trtllm) names the
    backend's seed input and says whether perf metrics and acceptance outputs exist; None: our engine has all."""
    pre_out = {"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
               "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
               "OUT_END_ID": "_PREPROCESSOR_END_ID", "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID"}
    engine_in = {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                 "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_PREPROCESSOR_END_ID",
                 "pad_id": "_PREPROCESSOR_PAD_ID", "stop_words_list": "_STOP_WORDS_IDS", "streaming": "stream",
                 "temperature": "temperature", "runtime_top_k": "top_k", "runtime_top_p": "top_p", "seed": "seed",
                 "return_perf_metrics": "return_perf_metrics", "exclude_input_in_output": "exclude_input_in_output"}
    engine_out = {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}
    engine_out.update({out[0]: out[0] for out in C.ACCEPTANCE_OUTPUTS})
    ens_inputs, ens_outputs = C.ENSEMBLE_INPUTS, C.ENSEMBLE_OUTPUTS
    acceptance_step = None
    if contract is not None:
        engine_in = {(contract.seed_input if k == "seed" else k): v for k, v in engine_in.items()}
        if not contract.perf_metrics:
            del engine_in["return_perf_metrics"]
            engine_out = {k: v for k, v in engine_out.items() if k not in _ACCEPTANCE_NAMES}
            ens_inputs = tuple(t for t in ens_inputs if t[0] != "return_perf_metrics")
            ens_outputs = tuple(t for t in ens_outputs if t[0] not in _ACCEPTANCE_NAMES)
        else:  # the acceptance outputs reach the ensemble through its acceptance step, which counts them
            engine_out.update(_ACCEPTANCE_INTERNAL)
            step_in = {**_ACCEPTANCE_INTERNAL, "sequence_length": "_SEQUENCE_LENGTH"}
            acceptance_step = C.step(ACCEPTANCE_STEPS[name], step_in, _STEP_OUTPUTS)
    post_in = {"TOKENS_BATCH": "_TOKENS_BATCH", "SEQUENCE_LENGTH": "_SEQUENCE_LENGTH"}
    if stream_key:
        pre_out["STREAM_KEY"] = "_STREAM_KEY"
        engine_in["stream_key"] = "_STREAM_KEY"
        engine_out.update({"stream_key": "_ENGINE_STREAM_KEY", "finished": "_FINISHED"})
        post_in.update({"STREAM_KEY": "_ENGINE_STREAM_KEY", "FINISHED": "_FINISHED"})
    steps = [
        C.step("preprocessing", {"QUERY": "text_input", "MESSAGES": "messages", "REQUEST_OUTPUT_LEN": "max_tokens",
                                 "STOP_WORDS_DICT": "stop_words", "END_ID": "end_id", "PAD_ID": "pad_id",
                                 "CHAT_TEMPLATE": "chat_template", "TEMPERATURE": "temperature",
                                 "TOP_K": "top_k", "TOP_P": "top_p"}, pre_out),
        C.step(engine_name, engine_in, engine_out),
        C.step("postprocessing", post_in, {"OUTPUT": "text_output",
                                           "OUTPUT_TOKEN_COUNT": C.OUTPUT_TOKEN_COUNT[0]}),
    ] + ([acceptance_step] if acceptance_step else [])
    return C.ensemble(name, spec.max_batch_size, C.inputs(ens_inputs), C.outputs(ens_outputs), steps)


_ACCEPTANCE_NAMES = {out[0] for out in C.ACCEPTANCE_OUTPUTS}
# engine output -> the ensemble tensor feeding the acceptance step's input of the same name; its outputs
_ACCEPTANCE_INTERNAL = {n: f"_{n.upper()}" for n in (*_ACCEPTANCE_NAMES, C.ARRIVAL_TIME_OUTPUT[0])}
_STEP_OUTPUTS = {out[0]: out[0] for out in C.ACCEPTANCE_OUTPUTS}


def acceptance_step_config(spec: BuildSpec, ensemble_name: str, speculative: bool) -> dict:
    """The python step after a TensorRT-LLM engine (trtllm, llmapi): the engine's perf-metrics outputs in (all
    optional: they come only when a request asks return_perf_metrics; trtllm adds sequence_length, always there),
    typed as that engine sends them (perf_output_types), the acceptance outputs out as numbers; labelled with the
    ensemble it serves, the tree it drafts with and the dtype."""
    trtllm = spec.engine == "trtllm"
    types = perf_output_types(None if trtllm else llmapi_release(spec.llmapi_version))
    ins = [C.tensor(n, types[n], d, optional=True) for n, _, d in C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)]
    if trtllm:
        ins.append(C.tensor("sequence_length", "TYPE_INT32", [-1]))
    return C.python_model(
        ACCEPTANCE_STEPS[ensemble_name], spec.max_batch_size if trtllm else 0, ins, C.outputs(C.ACCEPTANCE_OUTPUTS),
        {"model": ensemble_name, "tree": spec.tree.label() if speculative else "none", "dtype": spec.dtype,
         "engine": spec.engine})


def perf_output_types(release: LlmapiRelease | None) -> dict[str, str]:
    """{perf-metrics output: the Triton type the engine model really sends}: numbers from the tensorrtllm backend
    (release None); from the LLM-API model, BYTES holding the numbers' text where its model.py builds them with
    text_output's dtype (eagle_trt.llmapi_release), whatever its config.pbtxt declares."""
    outputs = C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)
    if release is not None and release.perf_outputs_bytes:
        return {name: "TYPE_STRING" for name, _, _ in outputs}
    return {name: data_type for name, data_type, _ in outputs}


# ---- engine models ----------------------------------------------------------------------------------------------
def python_engine_config(spec: BuildSpec, options: ServingOptions, name: str, speculative: bool) -> dict:
    """Our runtime in a decoupled python model; eagle_engine and base_engine share model.py."""
    engine_inputs = C.inputs(C.ENGINE_INPUTS + (C.STREAM_KEY_INPUT,))
    engine_outputs = C.outputs(C.ENGINE_OUTPUTS + C.STREAM_KEY_OUTPUTS)
    return C.python_model(
        name, spec.max_batch_size, engine_inputs, engine_outputs,
        {
            "base_dir": spec.base.path,
            "draft_dir": spec.draft.path if speculative else "",
            "tree": json.dumps(spec.tree.to_dict(), separators=(",", ":")),  # resolved: choices inline
            "device": spec.device,
            "dtype": spec.dtype,
            "max_seq_len": spec.max_seq_len,
            # eagle_engine and base_engine run side by side: each takes its share of the cores unless told
            "threads": options.engine_threads,
            "engines_sharing": 2 * options.engine_instances,
            # the tree by how many requests run at once (runtime.batching); the base engine decodes plainly
            "load_policy": json.dumps((resolve_load_policy(spec.tree, options.load_policy) if speculative
                                       else LoadPolicy((None,))).to_list(), separators=(",", ":")),
        } | ({} if spec.draft_vocab is None else {"draft_vocab": spec.draft_vocab}),
        instances=options.engine_instances, decoupled=True,
    )


def trtllm_engine_config(spec: BuildSpec, options: ServingOptions, name: str, engine_dir: Path, speculative: bool,
                         contract: BackendContract) -> dict:
    """The tensorrtllm backend model (parameters per docs/trtllm_formats.md §4), its tensors as the targeted
    backend release names them (eagle_trt.backend)."""
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
        for n, t, d, o in _trtllm_inputs(contract)
    ]
    fields = {
        "name": name, "backend": "tensorrtllm", "max_batch_size": spec.max_batch_size,
        "model_transaction_policy": {"decoupled": options.decoupled},
        "dynamic_batching": {
            "preferred_batch_size": [spec.max_batch_size],
            "max_queue_delay_microseconds": options.max_queue_delay_us,
            "default_queue_policy": {"max_queue_size": options.max_queue_size},
        },
        "input": engine_inputs,
        "output": C.outputs(tuple(t for t in C.ENGINE_OUTPUTS if contract.perf_metrics or t[0] not in _ACCEPTANCE_NAMES)
                            + ((C.ARRIVAL_TIME_OUTPUT,) if contract.perf_metrics else ())),
        "instance_group": C.instance_group("KIND_CPU", 1),  # one rank per GPU via MPI, not instances
        "parameters": C.params(parameters),
    }
    return fields


def _trtllm_inputs(contract: BackendContract):
    for n, t, d, o in C.ENGINE_INPUTS:
        if n == "return_perf_metrics" and not contract.perf_metrics:
            continue
        yield (contract.seed_input if n == "seed" else n), t, d, o


def llmapi_engine_config(name: str, options: ServingOptions, release: LlmapiRelease) -> dict:
    """TensorRT-LLM's LLM-API python model (triton_backend/all_models/llmapi/tensorrt_llm/config.pbtxt: the inputs
    and outputs we use, same names; the perf-metrics outputs typed as its model.py really builds them, so the
    ensemble can pass them to the acceptance step); model.yaml beside model.py configures it."""
    ins = C.inputs(LLMAPI_INPUTS)
    types = perf_output_types(release)
    outs = C.outputs((("text_output", "TYPE_STRING", [-1]), ("finish_reason", "TYPE_STRING", [-1]))
                     + tuple((n, types[n], d) for n, _, d in C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)))
    return {"name": name, "backend": "python", "max_batch_size": 0, "input": ins, "output": outs,
            "model_transaction_policy": {"decoupled": options.decoupled},
            "instance_group": C.instance_group("KIND_CPU", 1)}


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


def llmapi_ensemble_config(name: str, engine_name: str) -> dict:
    """The tensorrtllm request names mapped onto the LLM-API model's inputs; text back, and the acceptance outputs
    through the acceptance step."""
    used = set(LLMAPI_FROM_ENSEMBLE.values())
    theirs = {ours: name for name, ours in LLMAPI_FROM_ENSEMBLE.items()}
    llmapi = {n: (t, o) for n, t, _, o in LLMAPI_INPUTS}
    ins = [C.tensor(n, llmapi[theirs[n]][0], d, o and llmapi[theirs[n]][1])  # its types: max_tokens is INT32
           for n, _, d, o in C.ENSEMBLE_INPUTS if n in used]
    outputs = {"text_output": "text_output"} | _ACCEPTANCE_INTERNAL
    steps = [C.step(engine_name, LLMAPI_FROM_ENSEMBLE, outputs),
             C.step(ACCEPTANCE_STEPS[name], _ACCEPTANCE_INTERNAL, _STEP_OUTPUTS)]
    return C.ensemble(name, 0, ins, C.outputs(t for t in C.ENSEMBLE_OUTPUTS if t != C.OUTPUT_TOKEN_COUNT), steps)


def _vllm(spec: BuildSpec) -> tuple[dict[str, dict], dict[str, object]]:
    """vLLM backend layout of Triton's speculative-decoding tutorial (Feature_Guide/Speculative_Decoding/vLLM), with
    vLLM's current `speculative_config` (the top-level speculative_model keys went in vllm-project/vllm#15466);
    vLLM drafts a chain of num_speculative_tokens = our chain:N."""
    configs, files = {}, {}
    for name in ENSEMBLES:
        configs[name] = {"name": name, "backend": "vllm", "instance_group": C.instance_group("KIND_MODEL", 1)}
        model = {"model": str(spec.engine_base_path), "dtype": spec.dtype, "max_model_len": spec.max_seq_len,
                 "tensor_parallel_size": spec.tp_size}
        if name == EAGLE_MODEL and spec.draft is not None:
            model["speculative_config"] = {
                "method": "eagle3" if spec.draft_format == "eagle3" else "eagle", "model": str(spec.engine_draft_path),
                "num_speculative_tokens": spec.tree.max_draft_tokens, "draft_tensor_parallel_size": 1}
        files[f"{name}/1/model.json"] = json.dumps(model, indent=2) + "\n"
    return configs, files


_LLMAPI_README = """This model is TensorRT-LLM's LLM-API python model (PyTorch backend; the only TensorRT-LLM route for EAGLE
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

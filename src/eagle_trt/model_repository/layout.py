"""The Triton model repository's shared parts: the ensembles around an engine, preprocessing and postprocessing, the
acceptance step after a TensorRT-LLM engine, and the writer. Each engine kind writes its own models with these
(eagle_trt.engines: `Engine.repository`, `engines.write_model_repository`).

```
model_repository/
  eagle_model/   ensemble: text_input, max_tokens, stream, ... -> text_output + acceptance outputs
  base_model/    the same ensemble around the plain engine (for the comparison)
  preprocessing/ python: chat template (optional), tokenize, end/pad/stop ids, request validation
  postprocessing/ python: incremental detokenization
  eagle_engine/  the engine kind's model: ours, TensorRT-LLM's tensorrtllm backend or its LLM-API model
  base_engine/   the same without speculation
  eagle_acceptance/, base_acceptance/  after a TensorRT-LLM engine: passes the acceptance outputs through and counts
                 them on the metrics port
```
For `vllm` the repository is the vLLM backend's (Triton's speculative-decoding tutorial): eagle_model/ and
base_model/ each with `1/model.json`. Every value shared between models (max_batch_size, lengths, paths, the
tree) comes from the spec; serving knobs come from `ServingOptions`.
"""

from __future__ import annotations

import logging
import shutil
from importlib import resources
from pathlib import Path

from eagle_trt.build_spec import SPEC_FILE, BuildSpec
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.spec import BASE_MODEL, EAGLE_MODEL

log = logging.getLogger(__name__)

ENSEMBLES = {EAGLE_MODEL: "eagle_engine", BASE_MODEL: "base_engine"}
# trtllm / llmapi: the python step counting each ensemble's acceptance outputs (python_models/acceptance_step.py)
ACCEPTANCE_STEPS = {EAGLE_MODEL: "eagle_acceptance", BASE_MODEL: "base_acceptance"}


def write_models(repo_dir: Path, configs: dict[str, dict], files: dict[str, object]) -> list[str]:
    """Write each model's config.pbtxt (built and checked against Triton's schema) and its files (text, or a
    source Path copied); returns the model names."""
    repo_dir.mkdir(parents=True, exist_ok=True)
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


def text_models(spec: BuildSpec, bundle_dir: Path,
                options: ServingOptions) -> tuple[dict[str, dict], dict[str, object]]:
    """Preprocessing and postprocessing (our tokenizer side of the tensorrtllm-style ensembles)."""
    configs = {"preprocessing": preprocessing_config(spec, bundle_dir, options),
               "postprocessing": postprocessing_config(spec, bundle_dir, options)}
    files = {f"{name}/1/{target}": python_model_source(source) for name in configs
             for target, source in (("model.py", f"{name}.py"), ("model_params.py", "model_params.py"))}
    return configs, files


def add_acceptance_step(spec: BuildSpec, ensemble_name: str, speculative: bool, configs: dict, files: dict, *,
                        input_types: dict[str, str], batched: bool, count_output_tokens: bool) -> None:
    """The ensemble's acceptance step after a TensorRT-LLM engine: its config and model files."""
    step_name = ACCEPTANCE_STEPS[ensemble_name]
    configs[step_name] = acceptance_step_config(spec, ensemble_name, speculative, input_types=input_types,
                                                batched=batched, count_output_tokens=count_output_tokens)
    files[f"{step_name}/1/model.py"] = python_model_source("acceptance_step.py")
    files[f"{step_name}/1/model_params.py"] = python_model_source("model_params.py")


def python_model_source(filename: str) -> Path:
    return Path(str(resources.files("eagle_trt.model_repository.python_models") / filename))


# ---- text models ------------------------------------------------------------------------------------------------
def spec_parameter(bundle_dir: Path) -> dict:
    """What a python model reads its values from: the bundle's spec (python_models/model_params.bundle_spec), so
    config.pbtxt carries only what Triton needs and the serving knobs."""
    return {"bundle_spec": bundle_dir / SPEC_FILE}


def preprocessing_config(spec: BuildSpec, bundle_dir: Path, options: ServingOptions) -> dict:
    return C.python_model(
        "preprocessing", spec.max_batch_size, C.inputs(C.PREPROCESSING_INPUTS), C.outputs(C.PREPROCESSING_OUTPUTS),
        spec_parameter(bundle_dir), instances=options.preprocessing_instances)


def postprocessing_config(spec: BuildSpec, bundle_dir: Path, options: ServingOptions) -> dict:
    return C.python_model(
        "postprocessing", spec.max_batch_size, C.inputs(C.POSTPROCESSING_INPUTS), C.outputs(C.POSTPROCESSING_OUTPUTS),
        spec_parameter(bundle_dir), instances=options.postprocessing_instances)


def text_ensemble_config(spec: BuildSpec, name: str, engine_name: str, *, stream_key: bool, seed_input: str = "seed",
                         perf_metrics: bool = True, acceptance_step: bool = False, cached_tokens: bool = False) -> dict:
    """The tensorrtllm-style ensemble: preprocessing -> engine -> postprocessing. `seed_input`: the name the engine
    reads the seed under; `perf_metrics`: the engine takes return_perf_metrics and answers the acceptance outputs;
    `acceptance_step`: they reach the ensemble through the acceptance step, which counts them; `cached_tokens`: the
    engine answers cached_prompt_tokens, passed on as an ensemble output."""
    pre_out = {"INPUT_ID": "_INPUT_ID", "REQUEST_INPUT_LEN": "_REQUEST_INPUT_LEN",
               "REQUEST_OUTPUT_LEN": "_REQUEST_OUTPUT_LEN", "STOP_WORDS_IDS": "_STOP_WORDS_IDS",
               "OUT_END_ID": "_PREPROCESSOR_END_ID", "OUT_PAD_ID": "_PREPROCESSOR_PAD_ID"}
    engine_in = {"input_ids": "_INPUT_ID", "input_lengths": "_REQUEST_INPUT_LEN",
                 "request_output_len": "_REQUEST_OUTPUT_LEN", "end_id": "_PREPROCESSOR_END_ID",
                 "pad_id": "_PREPROCESSOR_PAD_ID", "stop_words_list": "_STOP_WORDS_IDS", "streaming": "stream",
                 "temperature": "temperature", "runtime_top_k": "top_k", "runtime_top_p": "top_p",
                 seed_input: "seed", "return_perf_metrics": "return_perf_metrics",
                 "exclude_input_in_output": "exclude_input_in_output"}
    engine_out = {"output_ids": "_TOKENS_BATCH", "sequence_length": "_SEQUENCE_LENGTH"}
    engine_out.update({out[0]: out[0] for out in C.ACCEPTANCE_OUTPUTS})
    ens_inputs, ens_outputs = C.ENSEMBLE_INPUTS, C.ENSEMBLE_OUTPUTS
    if cached_tokens:
        engine_out[C.CACHED_PROMPT_TOKENS[0]] = C.CACHED_PROMPT_TOKENS[0]
        ens_outputs = ens_outputs + (C.CACHED_PROMPT_TOKENS,)
    step = None
    if not perf_metrics:
        del engine_in["return_perf_metrics"]
        engine_out = {k: v for k, v in engine_out.items() if k not in ACCEPTANCE_NAMES}
        ens_inputs = tuple(t for t in ens_inputs if t[0] != "return_perf_metrics")
        ens_outputs = tuple(t for t in ens_outputs if t[0] not in ACCEPTANCE_NAMES)
    elif acceptance_step:  # the acceptance outputs reach the ensemble through its acceptance step, which counts them
        engine_out.update(ACCEPTANCE_INTERNAL)
        step_in = {**ACCEPTANCE_INTERNAL, "sequence_length": "_SEQUENCE_LENGTH"}
        step = C.step(ACCEPTANCE_STEPS[name], step_in, ACCEPTANCE_STEP_OUTPUTS)
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
    ] + ([step] if step else [])
    return C.ensemble(name, spec.max_batch_size, C.inputs(ens_inputs), C.outputs(ens_outputs), steps)


ACCEPTANCE_NAMES = {out[0] for out in C.ACCEPTANCE_OUTPUTS}
# engine output -> the ensemble tensor feeding the acceptance step's input of the same name; its outputs
ACCEPTANCE_INTERNAL = {n: f"_{n.upper()}" for n in (*ACCEPTANCE_NAMES, C.ARRIVAL_TIME_OUTPUT[0])}
ACCEPTANCE_STEP_OUTPUTS = {out[0]: out[0] for out in C.ACCEPTANCE_OUTPUTS}


def acceptance_step_config(spec: BuildSpec, ensemble_name: str, speculative: bool, *, input_types: dict[str, str],
                           batched: bool, count_output_tokens: bool) -> dict:
    """The python step after a TensorRT-LLM engine: the engine's perf-metrics outputs in (all optional: they come
    only when a request asks return_perf_metrics), typed as that engine sends them (`input_types`: numbers, or BYTES
    from the LLM-API model), plus sequence_length where the engine answers token ids (`count_output_tokens`); the
    acceptance outputs out as numbers; labelled with the ensemble it serves, the tree it drafts with and the dtype."""
    ins = [C.tensor(n, input_types[n], d, optional=True) for n, _, d in C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)]
    if count_output_tokens:
        ins.append(C.tensor("sequence_length", "TYPE_INT32", [-1]))
    return C.python_model(
        ACCEPTANCE_STEPS[ensemble_name], spec.max_batch_size if batched else 0, ins, C.outputs(C.ACCEPTANCE_OUTPUTS),
        {"model": ensemble_name, "tree": spec.tree.label() if speculative else "none", "dtype": spec.dtype,
         "count_output_tokens": count_output_tokens})


ACCEPTANCE_TYPES = {name: data_type for name, data_type, _ in C.ACCEPTANCE_OUTPUTS + (C.ARRIVAL_TIME_OUTPUT,)}

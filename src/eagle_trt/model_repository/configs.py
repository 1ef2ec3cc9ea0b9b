"""Triton model configs as `model_config_pb2.ModelConfig` messages, written with protobuf's text format.

Every config.pbtxt of the model repository is built here from a plain dict (proto field names) that
`json_format.ParseDict` checks against Triton's schema (tritonclient ships it), then rendered by `render`.
Nothing is filled into string templates. The tensor names are those of TensorRT-LLM's `inflight_batcher_llm`
repository (tensorrtllm_backend `all_models/inflight_batcher_llm`, docs/trtllm_formats.md §4), so clients and
benchmark tools that speak the tensorrtllm request format (text_input, max_tokens, stream, ...) work unchanged.

NOTE(proto3): proto3 does not serialize scalar fields equal to their default, so `max_batch_size: 0` would vanish
from the text; `render` writes it explicitly (as pytriton's generator does), and `parse` reads it back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from eagle_trt.errors import EagleTrtError, missing_extra

# ---- the request interface of eagle_model / base_model (the tensorrtllm ensemble's names) ------------------------
# (name, data_type, dims, optional)
ENSEMBLE_INPUTS = (
    ("text_input", "TYPE_STRING", [1], True),  # text_input or messages (preprocessing says which is missing)
    ("max_tokens", "TYPE_INT64", [1], False),  # 64-bit so that 2^32+4 reaches our range check, not a wrap to 4
    ("stream", "TYPE_BOOL", [1], True),
    ("temperature", "TYPE_FP32", [1], True),
    ("top_k", "TYPE_INT32", [1], True),
    ("top_p", "TYPE_FP32", [1], True),
    ("seed", "TYPE_UINT64", [1], True),
    ("stop_words", "TYPE_STRING", [-1], True),
    ("end_id", "TYPE_INT64", [1], True),
    ("pad_id", "TYPE_INT64", [1], True),
    ("return_perf_metrics", "TYPE_BOOL", [1], True),
    ("exclude_input_in_output", "TYPE_BOOL", [1], True),
    ("chat_template", "TYPE_BOOL", [1], True),  # ours: apply the base's chat template (default from the bundle)
    ("messages", "TYPE_STRING", [1], True),  # ours: a JSON list of {role, content} under the chat template
)
ACCEPTANCE_OUTPUTS = (
    ("acceptance_rate", "TYPE_FP32", [1]),
    ("total_accepted_draft_tokens", "TYPE_INT32", [1]),
    ("total_draft_tokens", "TYPE_INT32", [1]),
)
# TensorRT-LLM's perf-metrics output answered beside the acceptance ones (same on every response of a request): the
# trtllm / llmapi acceptance step tells requests apart by it (python_models/acceptance_step.py)
ARRIVAL_TIME_OUTPUT = ("arrival_time_ns", "TYPE_INT64", [1])
# ours: the number of generated tokens in this response (what OpenAI's usage.completion_tokens adds up)
OUTPUT_TOKEN_COUNT = ("output_token_count", "TYPE_INT32", [1])
ENSEMBLE_OUTPUTS = (("text_output", "TYPE_STRING", [-1]),) + ACCEPTANCE_OUTPUTS + (OUTPUT_TOKEN_COUNT,)
# ours, pytorch engine: the prompt tokens a request did not prefill because an earlier turn's cache held them
# (runtime.prefix); an engine output and an ensemble output; OpenAI's usage.prompt_tokens_details.cached_tokens
CACHED_PROMPT_TOKENS = ("cached_prompt_tokens", "TYPE_INT32", [1])

# ---- the tensorrt_llm model's tensor contract, spoken by every engine model ---------------------------------------
ENGINE_INPUTS = (
    ("input_ids", "TYPE_INT32", [-1], False),
    ("input_lengths", "TYPE_INT32", [1], False),
    ("request_output_len", "TYPE_INT32", [1], False),
    ("end_id", "TYPE_INT32", [1], True),
    ("pad_id", "TYPE_INT32", [1], True),
    ("streaming", "TYPE_BOOL", [1], True),
    ("temperature", "TYPE_FP32", [1], True),
    ("runtime_top_k", "TYPE_INT32", [1], True),
    ("runtime_top_p", "TYPE_FP32", [1], True),
    ("seed", "TYPE_UINT64", [1], True),
    ("stop_words_list", "TYPE_INT32", [2, -1], True),
    ("return_perf_metrics", "TYPE_BOOL", [1], True),
    ("exclude_input_in_output", "TYPE_BOOL", [1], True),
)
ENGINE_OUTPUTS = (
    ("output_ids", "TYPE_INT32", [-1, -1]),
    ("sequence_length", "TYPE_INT32", [-1]),
) + ACCEPTANCE_OUTPUTS
# The python engine model adds a pass-through request key and a final flag, so that postprocessing can keep
# per-stream detokenizer state (Triton refuses a step fed by both a decoupled and a non-decoupled model).
STREAM_KEY_INPUT = ("stream_key", "TYPE_UINT64", [1], True)
STREAM_KEY_OUTPUTS = (("stream_key", "TYPE_UINT64", [1]), ("finished", "TYPE_BOOL", [1]))

PREPROCESSING_INPUTS = (
    ("QUERY", "TYPE_STRING", [1], True),
    ("MESSAGES", "TYPE_STRING", [1], True),
    ("REQUEST_OUTPUT_LEN", "TYPE_INT64", [1], False),
    ("STOP_WORDS_DICT", "TYPE_STRING", [-1], True),
    ("END_ID", "TYPE_INT64", [1], True),
    ("PAD_ID", "TYPE_INT64", [1], True),
    ("CHAT_TEMPLATE", "TYPE_BOOL", [1], True),
    ("TEMPERATURE", "TYPE_FP32", [1], True),
    ("TOP_K", "TYPE_INT32", [1], True),
    ("TOP_P", "TYPE_FP32", [1], True),
)
PREPROCESSING_OUTPUTS = (
    ("INPUT_ID", "TYPE_INT32", [-1]),
    ("REQUEST_INPUT_LEN", "TYPE_INT32", [1]),
    ("REQUEST_OUTPUT_LEN", "TYPE_INT32", [1]),
    ("STOP_WORDS_IDS", "TYPE_INT32", [2, -1]),
    ("OUT_END_ID", "TYPE_INT32", [1]),
    ("OUT_PAD_ID", "TYPE_INT32", [1]),
    ("STREAM_KEY", "TYPE_UINT64", [1]),
)
POSTPROCESSING_INPUTS = (
    ("TOKENS_BATCH", "TYPE_INT32", [-1, -1], False),
    ("SEQUENCE_LENGTH", "TYPE_INT32", [-1], False),
    ("STREAM_KEY", "TYPE_UINT64", [1], True),
    ("FINISHED", "TYPE_BOOL", [1], True),
)
POSTPROCESSING_OUTPUTS = (("OUTPUT", "TYPE_STRING", [-1]), ("OUTPUT_TOKEN_COUNT", "TYPE_INT32", [1]))


# --backoff of the pytorch engine (runtime.backoff): on backs off each request while it runs alone, and every batch
# of 2 or more as one (runtime.batching); batches: the batches only; off: neither; auto: on
BACKOFF_CHOICES = ("auto", "on", "batches", "off")


@dataclass(frozen=True, kw_only=True)
class ServingOptions:
    """Serving knobs: how many instances, how requests queue, KV-cache share. Not part of the BuildSpec."""

    engine_instances: int = 1
    engine_threads: int = 0  # torch intra-op threads per pytorch-engine instance; 0 = the cores shared among them
    load_policy: str = "auto"  # pytorch engine: trees by batch size ("t1;t2;...;none"); auto: runtime.batching default
    backoff: str = "auto"  # pytorch engine: plain steps where faster (runtime.backoff); one of BACKOFF_CHOICES
    preprocessing_instances: int = 1
    postprocessing_instances: int = 1
    max_queue_delay_us: int = 0
    max_queue_size: int = 0
    kv_cache_free_gpu_mem_fraction: float = 0.9
    enable_kv_cache_reuse: bool = False
    exclude_input_in_output: bool = True
    decoupled: bool = True

    @property
    def engines_sharing(self) -> int:
        """Engine instances that share this machine's cores: eagle_engine's and base_engine's, side by side."""
        return 2 * self.engine_instances

    def engine_cpu_threads(self) -> int:
        """The intra-op threads each engine instance runs with here (`cpu_threads`): what `--tree auto` tunes at,
        so the tree fits the engine as it is served; the served model computes the same on its machine."""
        return cpu_threads(self.engine_threads, self.engines_sharing)

    def validate(self) -> None:
        for name in ("engine_instances", "preprocessing_instances", "postprocessing_instances"):
            if getattr(self, name) < 1:
                raise EagleTrtError(f"{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}",
                                    "pass a positive instance count")
        if self.load_policy != "auto":
            from eagle_trt.load_policy import LoadPolicy

            LoadPolicy.parse(self.load_policy)  # names the bad tree
        if self.backoff not in BACKOFF_CHOICES:
            raise EagleTrtError(f"backoff {self.backoff!r} is not one of {', '.join(BACKOFF_CHOICES)}",
                                f"pass --backoff {'|'.join(BACKOFF_CHOICES)}")
        if self.engine_threads < 0:
            raise EagleTrtError(f"engine-threads must be >= 0, got {self.engine_threads}",
                                "pass 0 to share the cores among the engine instances, or a thread count")
        if self.max_queue_delay_us < 0 or self.max_queue_size < 0:
            raise EagleTrtError("max-queue-delay-us and max-queue-size must be >= 0", "pass 0 for no limit")
        if not 0.0 < self.kv_cache_free_gpu_mem_fraction <= 1.0:
            raise EagleTrtError(f"kv-cache-fraction {self.kv_cache_free_gpu_mem_fraction} is not in (0, 1]",
                                "pass a fraction of free GPU memory such as 0.9")


def cpu_threads(requested: int, engines_sharing: int) -> int:
    """Intra-op threads of a pytorch-engine instance: `requested`, or (0) an even share of the cores this process
    may use. The engine model sets it; `--tree auto` tunes at it, so the tree fits the engine as it is served.
    More threads than cores across the engines make OpenMP's spinning workers wait on each other's descheduled
    threads: measured in scripts/contention.py, 2 engines x 2 threads on 2 cores ran up to 10x slower."""
    if requested > 0:
        return requested
    return max(1, len(os.sched_getaffinity(0)) // max(1, engines_sharing))


def _pb():
    try:
        from google.protobuf import json_format, text_format
        from tritonclient.grpc import model_config_pb2
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise missing_extra(exc.name or "tritonclient", "serving") from None
    return model_config_pb2, json_format, text_format


def tensor(name: str, data_type: str, dims: list[int], optional: bool = False, **extra) -> dict:
    """One input/output entry in proto field names."""
    entry = {"name": name, "data_type": data_type, "dims": list(dims)}
    if optional:
        entry["optional"] = True
    entry.update(extra)
    return entry


def inputs(table) -> list[dict]:
    return [tensor(name, dtype, dims, optional) for name, dtype, dims, optional in table]


def outputs(table) -> list[dict]:
    return [tensor(name, dtype, dims) for name, dtype, dims in table]


def params(values: dict[str, object]) -> dict:
    """Model `parameters { key value { string_value } }`; booleans as true/false, everything else as str."""
    def text(v):
        return ("true" if v else "false") if isinstance(v, bool) else str(v)
    return {key: {"string_value": text(value)} for key, value in values.items()}


def build(fields: dict):
    """A dict of proto field names -> ModelConfig message, checked by Triton's schema."""
    model_config_pb2, json_format, _ = _pb()
    try:
        return json_format.ParseDict(fields, model_config_pb2.ModelConfig())
    except json_format.ParseError as exc:
        raise EagleTrtError(f"model config for {fields.get('name')!r} does not fit Triton's schema: {exc}",
                            "this is a bug in eagle-trt's config builder; please report it") from None


def render(config) -> str:
    """ModelConfig -> config.pbtxt text (max_batch_size always written, see the module note)."""
    _, _, text_format = _pb()
    body = text_format.MessageToString(config)
    lines = body.splitlines()
    if config.max_batch_size == 0:
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith(("platform:", "backend:"))), 1)
        lines.insert(at, "max_batch_size: 0")
    return "\n".join(lines) + "\n"


def parse(text: str):
    """config.pbtxt text -> ModelConfig (raises EagleTrtError naming the problem)."""
    model_config_pb2, _, text_format = _pb()
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise EagleTrtError(f"config.pbtxt does not parse: {exc}", "regenerate the model repository") from None


def instance_group(kind: str, count: int) -> list[dict]:
    return [{"kind": kind, "count": count}]


def python_model(name: str, max_batch_size: int, ins, outs, parameters: dict, *, instances: int = 1,
                 decoupled: bool = False) -> dict:
    """Fields of a python-backend model (preprocessing, postprocessing, our engine)."""
    fields = {
        "name": name, "backend": "python", "max_batch_size": max_batch_size,
        "input": ins, "output": outs,
        "instance_group": instance_group("KIND_CPU", instances),
        "parameters": params(parameters),
    }
    if decoupled:
        fields["model_transaction_policy"] = {"decoupled": True}
    return fields


def ensemble(name: str, max_batch_size: int, ins, outs, steps: list[dict]) -> dict:
    return {"name": name, "platform": "ensemble", "max_batch_size": max_batch_size, "input": ins,
            "output": outs, "ensemble_scheduling": {"step": steps}}


def step(model_name: str, input_map: dict[str, str], output_map: dict[str, str]) -> dict:
    """An ensemble step; map keys are the composing model's tensor names, values the ensemble's."""
    return {"model_name": model_name, "model_version": -1, "input_map": dict(input_map),
            "output_map": dict(output_map)}

"""`--engine vllm`: Triton's vLLM backend, in the layout of Triton's speculative-decoding tutorial
(Feature_Guide/Speculative_Decoding/vLLM): eagle_model/ and base_model/ are vLLM models (`1/model.json`) with vLLM's
`speculative_config` (the top-level speculative_model keys went in vllm-project/vllm#15466). vLLM drafts chains only
(its tree attention was removed) and reads the base and draft directories itself: a quantized base passes through.
"""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines.engine import Engine, ServingImage
from eagle_trt.engines.images import VLLM_RELEASE, triton_image
from eagle_trt.engines.quantized import vllm_refusal
from eagle_trt.errors import EagleTrtError
from eagle_trt.model_repository import configs as C
from eagle_trt.model_repository.layout import ENSEMBLES
from eagle_trt.quantization import Quantization
from eagle_trt.spec import EAGLE_MODEL, MODELS, DraftSpec, read_config
from eagle_trt.tree_config import SUFFIX_MARK, TreeConfig


class VllmEngine(Engine):
    name = "vllm"
    label = "Triton's vLLM backend"
    default_tree = "chain:3"  # vLLM drafts a chain of num_speculative_tokens
    reads_hf_directories = True
    takes_messages = False  # the vLLM model takes text_input only

    def draft_problems(self, draft: DraftSpec, backend_version: str | None = None) -> list[str]:
        missing = []
        if (draft.qkv_bias or draft.o_bias) and draft.format == "eagle1":
            missing.append("q/k/v biases in the draft layer")
        if draft.qk_norm:
            missing.append("q/k RMSNorm in the draft layer (a Qwen3-type layer)")
        return self.missing_in_draft_model(draft, missing)

    def quantization_refusal(self, quant: Quantization, backend_version: str | None = None) -> str | None:
        return vllm_refusal(quant)

    def check_tree(self, cfg: TreeConfig, backend_version: str | None) -> None:
        if cfg.suffix is not None:
            raise EagleTrtError(f"--tree {cfg.label()}: suffix candidates run on --engine pytorch and llmapi "
                                f"(TensorRT-LLM's sa_config), not vllm", f"drop {SUFFIX_MARK} from --tree")
        if cfg.kind != "chain":
            raise EagleTrtError(f"vLLM drafts chains only (its tree attention was removed), got --tree {cfg.label()}: "
                                "pass chain:N", "pass --tree chain:N, e.g. chain:3")

    def served_draft_change(self, draft: DraftSpec | None) -> str | None:
        """vLLM reads capture ids from the top-level `eagle_aux_hidden_state_layer_ids`, else from `eagle_config`,
        both as layer inputs: ids a layout counts as outputs (or keeps under another key) are written back as
        inputs at the top level."""
        if draft is None or draft.format != "eagle3" or draft.capture_layers is None:
            return None
        if draft.capture_source.startswith("eagle_aux_hidden_state_layer_ids"):
            return None
        return f"vLLM would read the capture ids ({draft.capture_source}) as layer inputs"

    def served_draft_config(self, draft: DraftSpec) -> dict:
        """The draft's own config, its capture ids moved to the top-level key as layer inputs."""
        cfg = {k: v for k, v in read_config(draft.path, "draft").items() if k not in ("aux_hidden_states_layer_ids",)}
        if isinstance(cfg.get("eagle_config"), dict):
            cfg["eagle_config"] = {k: v for k, v in cfg["eagle_config"].items()
                                   if k != "eagle_aux_hidden_state_layer_ids"}
        return cfg | {"eagle_aux_hidden_state_layer_ids": list(draft.capture_layers)}

    def repository(self, spec: BuildSpec, bundle_dir: Path, options):
        configs, files = {}, {}
        for name in ENSEMBLES:
            configs[name] = {"name": name, "backend": "vllm", "instance_group": C.instance_group("KIND_MODEL", 1)}
            model = {"model": str(spec.engine_base_path), "dtype": spec.dtype, "max_model_len": spec.max_seq_len,
                     "tensor_parallel_size": spec.tp_size}
            if name == EAGLE_MODEL and spec.draft is not None:
                model["speculative_config"] = {
                    "method": "eagle3" if spec.draft_format == "eagle3" else "eagle",
                    "model": str(spec.engine_draft_path), "num_speculative_tokens": spec.tree.max_draft_tokens,
                    "draft_tensor_parallel_size": 1}
            files[f"{name}/1/model.json"] = json.dumps(model, indent=2) + "\n"
        return configs, files

    def image(self, spec: BuildSpec) -> ServingImage:
        base = triton_image(VLLM_RELEASE, "vllm-python-")
        return ServingImage(image=base, base=base, derived=False, why="Triton's vLLM backend", install=())

    def repository_config(self, bundle: Path) -> Path:
        return bundle / "model_repository" / EAGLE_MODEL / "1" / "model.json"

    def queue_models(self) -> list[str]:
        return list(MODELS)  # the vLLM models themselves


VLLM = VllmEngine()

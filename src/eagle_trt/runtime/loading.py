"""Build the runtime's base model and draft head from checkpoint directories, tensor by tensor."""

from __future__ import annotations

import logging

import torch

from eagle_trt.checkpoints import open_weights
from eagle_trt.errors import EagleTrtError
from eagle_trt.quantization.reader import DequantizedWeights, account
from eagle_trt.runtime.draft import DraftHead, Eagle1Draft, Eagle3Draft, Eagle3Options
from eagle_trt.runtime.model import Llama, LlamaArgs
from eagle_trt.spec import PRECISIONS, DraftSpec, ModelSpec, Problem

log = logging.getLogger(__name__)

# the torch dtype each engine precision (spec.PRECISIONS) loads its weights as; int8: loaded in fp32, then quantized
# by runtime.linears.prepare
LOAD_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.float32,
               "native": torch.float32, "native-q8": torch.float32}
assert tuple(LOAD_DTYPES) == PRECISIONS
DRAFT_VOCAB_FILE = "draft_vocab.json"  # {"token_ids": [...most frequent first], "source": "..."}


def torch_dtype(name: str) -> torch.dtype:
    if name not in LOAD_DTYPES:
        raise EagleTrtError(f"unsupported dtype {name!r}", f"choose one of {', '.join(PRECISIONS)}")
    return LOAD_DTYPES[name]


def draft_vocab_ids(draft_dir, size: int | None) -> torch.Tensor | None:
    """The first `size` ids of the draft's frequency-ordered vocabulary file ([n] int64); None = all of the file
    if there is one, else no truncation; 0 = no truncation."""
    import json
    from pathlib import Path

    path = Path(draft_dir) / DRAFT_VOCAB_FILE
    if size == 0 or (size is None and not path.exists()):
        return None
    if not path.exists():
        raise EagleTrtError(f"--draft-vocab {size} needs {path}, which does not exist",
                            "train-draft writes it; or pass --draft-vocab 0 for the full vocabulary")
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))["token_ids"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise EagleTrtError(f"{path} is not a draft vocabulary file: {exc}",
                            'it must hold {"token_ids": [most frequent first]}') from None
    if size is not None and size > len(ids):
        raise EagleTrtError(f"--draft-vocab {size} exceeds the {len(ids)} ids in {path}",
                            f"pass at most {len(ids)}, or 0 for the full vocabulary")
    return torch.tensor(ids[:size] if size else ids, dtype=torch.long)  # [n]


def _fill(module: torch.nn.Module, reader, names: dict[str, str], where: str, optional=()) -> None:
    params = dict(module.named_parameters()) | dict(module.named_buffers())
    for ours, theirs in names.items():
        if ours not in params:
            continue
        if theirs not in reader:
            if ours in optional:
                continue
            raise EagleTrtError(f"{where} is missing tensor {theirs!r}", "the checkpoint is incomplete; re-download it")
        tensor = reader.get(theirs)
        target = params[ours]
        if tuple(tensor.shape) != tuple(target.shape):
            raise EagleTrtError(f"{where}: tensor {theirs!r} has shape {tuple(tensor.shape)}, expected "
                                f"{tuple(target.shape)}", "the config.json and the weights disagree")
        with torch.no_grad():
            target.copy_(tensor.to(target.dtype) if target.is_floating_point() else tensor)


def open_base_weights(spec: ModelSpec):
    """The base's weights as the runtime reads them: a quantized base dequantized exactly, module by module
    (quantization.reader.DequantizedWeights); a GGUF base through the GGUF reader, which dequantizes its blocks."""
    reader = open_weights(spec.path)
    quant = spec.quantization
    return DequantizedWeights(reader, quant) if quant is not None and quant.groups else reader


def stored_blocks(spec: ModelSpec, precision: str = "native") -> dict:
    """HF weight name -> (GGUF type name, its block rows) for every weight the native precisions read as blocks: a
    GGUF base's block-quantized tensors as stored; a 4-bit AWQ / GPTQ / compressed-tensors / Model-Optimizer INT4
    base's linears written as the same blocks (quantization.blocks: for precision native only where that is exact;
    a linear it does not write stays dequantized to float32, logged); {} for any other checkpoint."""
    from eagle_trt.checkpoints.gguf_reader import GGUFWeightReader
    from eagle_trt.quantization.blocks import quantized_blocks

    with open_weights(spec.path) as reader:
        if isinstance(reader, GGUFWeightReader):
            return {name: blocks for name in reader.names() if (blocks := reader.stored_blocks(name)) is not None}
        if spec.quantization is None or not spec.quantization.groups:
            return {}
        blocks, left = quantized_blocks(reader, spec.quantization, exact=precision == "native")
    for module, why in left.items():
        log.info("precision %s reads %s dequantized to float32: %s", precision, module, why)
    return blocks


def load_base(spec: ModelSpec, dtype: torch.dtype, device: str, skip: frozenset[str] = frozenset()) -> Llama:
    """The runtime Llama with the base's weights; `skip`: HF names left unread (their memory allocated but never
    touched, so not resident): the layer weights precision native reads as stored blocks instead."""
    args = LlamaArgs.from_spec(spec)
    with torch.device("meta"):
        model = Llama(args)
    model = model.to_empty(device=device).to(dtype)
    names = {ours: theirs for ours, theirs in model.hf_name_map().items() if theirs not in skip}
    if args.tie_word_embeddings:
        names.pop("lm_head.weight", None)
    with open_base_weights(spec) as reader:
        if not args.tie_word_embeddings and "lm_head.weight" not in reader:
            names["lm_head.weight"] = "model.embed_tokens.weight"  # some tied checkpoints omit the flag
        _fill(model, reader, names, f"base {spec.path}")
    if args.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    return model.eval().requires_grad_(False)


def draft_args(spec: DraftSpec) -> LlamaArgs:
    """The draft layer's shape: one decoder layer of the draft's dims, biases, q/k norms and RoPE, untied."""
    return LlamaArgs(**spec.dims(), num_hidden_layers=1, rms_norm_eps=spec.rms_norm_eps, rope_theta=spec.rope_theta,
                     rope_scaling=spec.rope_scaling, qkv_bias=spec.qkv_bias, o_bias=spec.o_bias,
                     mlp_bias=spec.mlp_bias, qk_norm=spec.qk_norm)


def build_draft(spec: DraftSpec, base_spec: ModelSpec, base: Llama | None) -> DraftHead:
    """An un-initialised draft head of the right shape (weights on the meta device if base is None)."""
    args = draft_args(spec)
    embed = base.embed_tokens if base is not None else torch.nn.Embedding(  # uninitialised (see Llama)
        spec.vocab_size, spec.hidden_size, _weight=torch.empty(spec.vocab_size, spec.hidden_size))  # [V, H]
    if spec.format == "eagle1":
        lm_head = base.lm_head if base is not None else torch.nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        return Eagle1Draft(args, embed, lm_head, bias=spec.has_fc_bias)
    target = spec.target_hidden_size or base_spec.hidden_size
    options = Eagle3Options(captures=max(1, spec.fc_in_features // target),
                            norm_before_residual=spec.norm_before_residual, input_norm=spec.input_norm,
                            fc_norm=spec.fc_norm, norm_output=spec.norm_output, final_norm=spec.final_norm)
    head = Eagle3Draft(args, embed, spec.draft_vocab_size or spec.vocab_size, target, options)
    head.capture = spec.capture_inputs(base_spec.num_hidden_layers)  # the base layers its fc reads (inputs)
    return head


# tensors a draft may carry beside its head's own: its copy of the base embeddings (used where it differs) and
# EAGLE-3's t2d (the inverse of d2t; the head reads d2t)
DRAFT_EXTRAS = ("embed_tokens.weight", "t2d")


def load_draft(spec: DraftSpec, base_spec: ModelSpec, base: Llama, dtype: torch.dtype, device: str) -> DraftHead:
    draft = build_draft(spec, base_spec, base).to(device=device, dtype=dtype)
    with open_weights(spec.path) as reader:
        _fill(draft, reader, draft.hf_names(spec.prefix), f"draft {spec.path}", optional=("d2t",))
        if spec.has_embed_tokens:
            own = reader.get("embed_tokens.weight")
            if own.shape == base.embed_tokens.weight.shape and not torch.equal(
                    own.to(base.embed_tokens.weight), base.embed_tokens.weight):
                draft.embed_tokens = torch.nn.Embedding.from_pretrained(own.to(device=device, dtype=dtype))
    if spec.format == "eagle3" and (spec.draft_vocab_size or spec.vocab_size) == spec.vocab_size:
        draft.d2t.zero_()  # draft vocab == base vocab: identity mapping
    return draft.eval().requires_grad_(False)


def expected_shapes(base: ModelSpec, draft: DraftSpec | None = None) -> tuple[dict, dict]:
    """(base, draft) maps of checkpoint tensor name -> the shape the runtime will load into, derived from the configs
    alone: the modules are built on the meta device (no memory), so this table cannot drift from the loader's."""
    args = LlamaArgs.from_spec(base)
    with torch.device("meta"):
        model = Llama(args)
        head = build_draft(draft, base, model) if draft is not None else None
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    base_names = model.hf_name_map()
    want_base = {theirs: shapes[ours] for ours, theirs in base_names.items() if ours in shapes}
    want_draft = {}
    if head is not None:
        own = {name: tuple(p.shape) for name, p in (*head.named_parameters(), *head.named_buffers())}
        want_draft = {theirs: own[ours] for ours, theirs in head.hf_names(draft.prefix).items()}
    return want_base, want_draft


OPTIONAL_TENSORS = {"lm_head.weight", "d2t"}  # tied heads may omit lm_head; a full-vocabulary EAGLE-3 draft, d2t
# tensors a checkpoint may carry that no reader needs: RoPE buffers older transformers saved (recomputed from config)
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
SIZE_HINT = ("the weights and config.json come from different models or the download is corrupt: re-download the "
             "checkpoint, or fix config.json's sizes (heads, head_dim, hidden, intermediate, vocab)")


def _read_anyway(what: str, spec) -> set[str]:
    """Tensors a checkpoint may hold beside the ones loaded into a module: a tied base's lm_head (transformers ties
    it to the embeddings and ignores the saved copy), a draft's DRAFT_EXTRAS."""
    if what == "draft":
        return set(DRAFT_EXTRAS)
    return {"lm_head.weight"} if spec.tie_word_embeddings else set()


FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
# tensor names only quantized layouts have: a checkpoint holding them without a quantization config is misread
QUANT_SUFFIXES = ("weight_scale", "weight_scale_inv", "weight_scale_2", "input_scale", "weight_packed", "qweight",
                  "qzeros", "scales", "g_idx", "weight_global_scale", "pre_quant_scale", "k_scale", "v_scale")
QUANT_CONFIG_HINT = ("a quantized checkpoint carries its quantization config (hf_quant_config.json, or config.json's "
                     "quantization_config) beside the weights: restore it from the download, or pass the unquantized "
                     "base")


def shape_problems(base: ModelSpec, draft: DraftSpec | None = None) -> list[Problem]:
    """Every tensor whose shape contradicts its config, that is missing, or that nothing reads (it would be silently
    dropped: another model than the checkpoint's), from the checkpoint headers only: run before any weight is
    loaded or converted. A quantized base's modules are checked in their stored layout, scale tensors included
    (quantization.reader.account). Empty when the checkpoints match their configs."""
    want_base, want_draft = expected_shapes(base, draft)
    problems = []
    for what, spec, want in (("base", base, want_base), ("draft", draft, want_draft)):
        if spec is None:
            continue
        quant = spec.quantization if what == "base" and spec.quantization and spec.quantization.groups else None
        with open_weights(spec.path) as reader:
            names, accounted = set(reader.names()), set()
            if quant is not None:
                found, accounted = account(quant, reader, want)
                hint = f"the weights do not match {quant.label} as its config ({quant.source}) describes it: " \
                       "re-export or re-download the checkpoint"
                problems += [Problem(message, hint) for message in found]
            for name, shape in want.items():
                if name in accounted:
                    continue
                if name not in names:
                    if name not in OPTIONAL_TENSORS:
                        problems.append(Problem(f"{what} tensor {name!r} is missing", SIZE_HINT))
                elif tuple(reader.shape(name)) != shape:
                    problems.append(Problem(f"{what} tensor {name!r} has shape {list(reader.shape(name))}, expected "
                                            f"{list(shape)} from {spec.path / 'config.json'}", SIZE_HINT))
                elif what == "base" and reader.dtype(name) not in FLOAT_DTYPES:
                    problems.append(Problem(f"{what} tensor {name!r} is stored as {reader.dtype(name)}, but no "
                                            "quantization config says how to dequantize it", QUANT_CONFIG_HINT))
            unread = sorted(n for n in names - set(want) - accounted - _read_anyway(what, spec)
                            if not n.endswith(IGNORED_SUFFIXES))
            if unread:
                problems.append(_unread_problem(what, spec, unread, quant))
    return problems


def _unread_problem(what: str, spec, unread: list[str], quant) -> Problem:
    more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
    listed = f"{what} tensor(s) {', '.join(map(repr, unread[:3]))}{more} in {spec.path}"
    if quant is None and any(n.rpartition(".")[2] in QUANT_SUFFIXES for n in unread):
        return Problem(f"{listed} are quantization tensors (scales, packed weights), but the {what} has no "
                       "quantization config", QUANT_CONFIG_HINT)
    described = f"{_layout_name(what, spec)} as its config.json describes it" if quant is None else (
        f"{_layout_name(what, spec)} as its config.json and quantization config "
        f"({quant.label.removeprefix('a ').removeprefix('an ')}) describe it")
    return Problem(f"{listed} are not part of the {described}, so nothing would read them",
                   "eagle-trt refuses to run a model without some of its weights: check that config.json belongs to "
                   "these weights (e.g. attention_bias, model_type), or that the family is one eagle-trt supports "
                   "(docs/models.md, Model families)")


def _layout_name(what: str, spec) -> str:
    return f"{spec.family_label} model" if what == "base" else f"{spec.layout_label} draft"


def require_shapes(base: ModelSpec, draft: DraftSpec | None = None) -> None:
    problems = shape_problems(base, draft)
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise EagleTrtError("checkpoint tensors do not match their config.json: "
                            + "; ".join(p.message for p in problems[:5]) + more,
                            "; ".join(dict.fromkeys(p.hint for p in problems)))

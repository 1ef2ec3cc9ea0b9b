"""The engine kinds that compute eagle_model, one module each behind one interface (engine.Engine): `trtllm`
(TensorRT-LLM engines), `llmapi` (TensorRT-LLM's LLM API), `pytorch` (ours) and `vllm`. Everything that depends on
the engine kind asks its object (`get(name)`); this module adds what needs all of them: the verdicts of every engine
on a pair with the routes that run it (`compatibility`), and a BuildSpec made by an engine's rules (`create_spec`).
"""

from __future__ import annotations

from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines.engine import Engine
from eagle_trt.engines.llmapi import LLMAPI
from eagle_trt.engines.llmapi_release import LLMAPI_RELEASES
from eagle_trt.engines.pytorch import PYTORCH
from eagle_trt.engines.trtllm import TRTLLM
from eagle_trt.engines.vllm import VLLM
from eagle_trt.errors import EagleTrtError
from eagle_trt.model_repository.configs import ServingOptions
from eagle_trt.model_repository.layout import write_models
from eagle_trt.spec import DraftSpec, ModelSpec, Problem, check_compatibility, raise_problems

ENGINES: dict[str, Engine] = {e.name: e for e in (TRTLLM, LLMAPI, PYTORCH, VLLM)}
NAMES = tuple(ENGINES)  # what computes eagle_model (docs/engines.md); `--engine` takes these and `auto`


def get(name: str) -> Engine:
    if name not in ENGINES:
        raise EagleTrtError(f"unknown engine {name!r}", f"choose one of {', '.join(NAMES)}")
    return ENGINES[name]


def running_routes(base: ModelSpec, draft: DraftSpec | None) -> list[str]:
    """The --engine (and --backend-version) choices that run this pair: for an engine with releases, the first
    release line that runs it."""
    routes = []
    for engine in ENGINES.values():
        versions = [r.version for r in LLMAPI_RELEASES.values()] if engine is LLMAPI else [None]
        for version in versions:
            if not engine.refusals(base, draft, version):
                routes.append(f"--engine {engine.name}" + (f" --backend-version {version}" if version else ""))
                break
    return routes


def compatibility(base: ModelSpec, draft: DraftSpec | None, engine: str | None = None,
                  backend_version: str | None = None) -> list[Problem]:
    """Every reason the pair cannot be served: the draft against the base (spec.check_compatibility) and, for
    `engine` (at its release `backend_version`), what that engine does not run; an engine's refusal hints at only
    the routes that run the pair."""
    problems = check_compatibility(base, draft)
    refusals = get(engine).refusals(base, draft, backend_version) if engine is not None else []
    if refusals:
        what = "pair" if draft is not None else "base"
        routes = running_routes(base, draft)
        hint = f"this {what} runs with " + " or ".join(routes) if routes else f"no engine runs this {what}"
        if draft is not None and draft.format == "eagle1" and get(engine) is LLMAPI:
            hint += "; or train an EAGLE-3 draft for this base (eagle-trt train-draft --format eagle3)"
        problems += [Problem(message, hint) for message in refusals]
    return problems


def require_runs(base: ModelSpec, draft: DraftSpec | None, engine: str, backend_version: str | None = None) -> None:
    """`compatibility` as one EagleTrtError."""
    problems = compatibility(base, draft, engine, backend_version)
    where = f" (base {base.path}, draft {draft.path})" if draft is not None else f" (base {base.path})"
    what = "the base and draft do not fit together" if draft is not None else "the base cannot be served"
    if problems and all(p.message.startswith(f"the {engine} engine") for p in problems):
        what = f"--engine {engine} cannot run this {'pair' if draft is not None else 'base'}"
    raise_problems(problems, what + where)


def spec_from(base: ModelSpec, draft: DraftSpec | None, *, engine: str, tree=None, dtype: str = "auto",
              tp_size: int = 1, max_batch_size: int = 8, max_input_len: int | None = None,
              max_seq_len: int | None = None, max_num_tokens: int | None = None, max_draft_len: int | None = None,
              num_eagle_layers: int | None = None, max_non_leaves_per_layer: int | None = None, device: str = "cpu",
              chat_template: bool = True, backend_version: str | None = None, draft_vocab: int | None = None,
              tree_tuning: dict | None = None) -> BuildSpec:
    """The BuildSpec `engine` builds: its release, its reading of the tree (None: its default), its dtype for
    `auto`, defaults from the base, then every rule (BuildSpec.validate and the engine's own) as one EagleTrtError.
    The max_draft_len group applies to engine trtllm only."""
    kind = get(engine)
    release = kind.release(backend_version)
    try:
        tree_cfg = kind.tree(tree, release)
    except EagleTrtError as exc:
        raise EagleTrtError(f"invalid build settings: tree: {exc.message}", exc.hint) from None
    sizes = (max_draft_len, num_eagle_layers, max_non_leaves_per_layer)
    if kind is not TRTLLM and any(v is not None for v in sizes):
        raise EagleTrtError(f"max_draft_len, num_eagle_layers and max_non_leaves_per_layer describe TensorRT-LLM "
                            f"engines; engine {engine} takes its sizes from the tree ({tree_cfg.label()})",
                            "drop them, or build with --engine trtllm")
    if max_seq_len is None:  # None means "from the base"; 0 or less is refused by validate(), never defaulted
        max_seq_len = min(8192, base.max_position_embeddings)
    spec = BuildSpec(
        base=base, draft=draft, engine=engine, tree=tree_cfg,
        dtype=kind.default_dtype(base, device) if dtype == "auto" else dtype, tp_size=tp_size,
        max_batch_size=max_batch_size, max_seq_len=max_seq_len,
        max_input_len=max(1, min(4096, max_seq_len // 2)) if max_input_len is None else max_input_len,
        max_num_tokens=8192 if max_num_tokens is None else max_num_tokens,
        trtllm=TRTLLM.settings(tree_cfg, *sizes) if kind is TRTLLM else None, backend_version=release,
        device=device, chat_template=chat_template, draft_vocab=draft_vocab, tree_tuning=tree_tuning)
    check(spec)
    return spec


def check(spec: BuildSpec) -> None:
    """The one validation path of a bundle: the base and draft fit together and its engine runs them; every option
    and cross-value rule holds (BuildSpec.validate, then the engine's own). Raises one EagleTrtError."""
    require_runs(spec.base, spec.draft, spec.engine, spec.backend_version)
    problems = spec.validate() + get(spec.engine).spec_problems(spec)
    if problems:
        raise EagleTrtError("invalid build settings: " + "; ".join(problems),
                            "change the options named above (see `eagle-trt build --help`)")


def create_spec(base_dir: str | Path, draft_dir: str | Path | None, **options) -> BuildSpec:
    """Read base + draft from their directories (once), then `spec_from`."""
    draft = DraftSpec.from_dir(draft_dir) if draft_dir is not None else None
    return spec_from(ModelSpec.from_dir(base_dir), draft, **options)


def write_model_repository(spec: BuildSpec, repo_dir: str | Path, *, bundle_dir: str | Path,
                           options: ServingOptions | None = None) -> list[str]:
    """Write every model of the bundle's repository (its engine's models, model_repository's shared parts);
    returns the model names. `bundle_dir` is the bundle's final path (engine directories and the spec are referenced
    by absolute path from there)."""
    options = options or ServingOptions()
    options.validate()
    configs, files = get(spec.engine).repository(spec, Path(bundle_dir).resolve(), options)
    return write_models(Path(repo_dir), configs, files)

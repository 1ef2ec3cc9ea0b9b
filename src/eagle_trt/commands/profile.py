"""`eagle-trt profile`: the engine's cost table on this machine (base forward per T and context, draft step per
width); table on stdout, JSON to a file. The tree tuner (`--tree auto`) reads the same table."""

from __future__ import annotations

import json
from pathlib import Path

import click

from eagle_trt.commands.options import CheckpointPath
from eagle_trt.spec import PRECISIONS


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a comma-separated list of integers (e.g. 1,2,4,8)") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: give at least one value, all >= 1")
    return values


@click.command("profile")
@click.option("--base", "base_dir", required=True, type=CheckpointPath("base", must_exist=True))
@click.option("--draft", "draft_dir", type=CheckpointPath("draft", must_exist=True),
              help="Also time one draft step per width.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--dtype", type=click.Choice(PRECISIONS), default="float32", show_default=True)
@click.option("--draft-vocab", type=click.IntRange(min=0), default=None,
              help="FR-Spec draft vocabulary size (default: the draft's draft_vocab.json; 0: full).")
@click.option("--tokens", default="1,2,4,8,16,32,64", show_default=True, help="Block sizes T of the base forward.")
@click.option("--contexts", default="128,512,1024", show_default=True, help="Cached prefix lengths.")
@click.option("--repeats", type=click.IntRange(min=1), default=9, show_default=True,
              help="Best of this many rounds (sizes interleaved in each).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON instead of the table.")
@click.option("--json-out", type=click.Path(path_type=Path), default=Path("profile.json"), show_default=True)
def profile_cmd(base_dir, draft_dir, device, dtype, draft_vocab, tokens, contexts, repeats, as_json, json_out):
    """Measure what a base forward over T tokens and a draft step cost on this machine.

    \b
    Example:
      eagle-trt profile --base $(eagle-trt demo-model | tail -1) --draft $(eagle-trt demo-model --draft | tail -1) \\
        --dtype int8
    """
    from eagle_trt.tuning.profile import ProfileConfig, format_table, profile_decoder
    from eagle_trt.runtime import EagleDecoder

    cfg = ProfileConfig(_ints(tokens), _ints(contexts), repeats=repeats)
    decoder = EagleDecoder.load(base_dir, draft_dir, tree="chain:1", device=device, dtype=dtype,
                              max_seq_len=max(cfg.contexts) + max(cfg.tokens) + 8, draft_vocab=draft_vocab)
    result = profile_decoder(decoder, cfg, echo=lambda m: click.echo(m, err=True))
    result["base"], result["draft"] = str(base_dir), None if draft_dir is None else str(draft_dir)
    json_out.write_text(json.dumps(result, indent=2))
    click.echo(json.dumps(result, indent=2) if as_json else format_table(result))
    click.echo(f"json: {json_out}", err=True)

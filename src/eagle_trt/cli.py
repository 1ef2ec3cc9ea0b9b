"""The eagle-trt command line: a Click group whose commands live in eagle_trt.commands.<name>.

Commands are imported only when invoked, so `eagle-trt --help` starts without torch. EagleTrtError raised
anywhere below becomes a clean message on stderr and exit code 1; usage errors exit 2 (Click's default).
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from eagle_trt.errors import EagleTrtError

# --help sections, each {command name: one-line summary}. A command `x-y` lives in eagle_trt.commands.x_y as
# `x_y_cmd` (a Click command or group), imported only when it runs.
SECTIONS: dict[str, dict[str, str]] = {
    "Models and drafts": {
        "inspect": "Report a base (and draft) checkpoint and whether they fit together.",
        "demo-model": "Materialize the SmolLM2 demo base (or our draft) and print its dir.",
        "train-draft": "Train an EAGLE-1/2 or EAGLE-3 draft for a base.",
        "convert": "Convert base + draft into a TensorRT-LLM EAGLE checkpoint.",
    },
    "Deploy": {
        "build": "Build a bundle: engines, Triton model repository, perf harness.",
        "serve": "Serve a bundle with tritonserver.",
        "demo": "The main job on the embedded default: build, serve, measure, report.",
    },
    "Run and measure": {
        "generate": "Generate text with EAGLE locally (--base) or from a server (--url).",
        "bench": "Benchmark the PyTorch runtime: plain vs EAGLE tok/s on a prompt set.",
        "perf": "Measure eagle_model against base_model and write a report.",
        "profile": "Measure base-forward and draft-step costs on this machine (cost table).",
        "tune": "Tune the draft tree to this machine (--tree auto) and cache the choice.",
    },
    "Kernels": {
        "bench-kernel": "Benchmark the tree-attention kernel.",
    },
}
COMMANDS: dict[str, str] = {name: summary for section in SECTIONS.values() for name, summary in section.items()}


class LazyGroup(click.Group):
    """A group that imports a command's module only when that command runs (or its help is shown)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module_name = cmd_name.replace("-", "_")
        attr = f"{module_name}_cmd"
        try:
            module = importlib.import_module(f"eagle_trt.commands.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"eagle_trt.commands.{module_name}":
                return None
            raise
        return getattr(module, attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        width = max(map(len, COMMANDS))  # one summary column across the sections
        for title, commands in SECTIONS.items():
            with formatter.section(title):
                formatter.write_dl([(name.ljust(width), summary) for name, summary in commands.items()])


class Cli(LazyGroup):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except EagleTrtError as exc:
            click.secho(f"Error: {exc.message}", fg="red", err=True)
            if exc.hint:
                click.echo(f"  hint: {exc.hint}", err=True)
            ctx.exit(1)


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="eagle-trt")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Deploy EAGLE speculative decoding with TensorRT-LLM and Triton.

    \b
    Examples:
      eagle-trt inspect --base ./Llama-3-8B-Instruct --draft ./EAGLE-LLaMA3-Instruct-8B
      eagle-trt build --base BASE --draft DRAFT -o out --engine pytorch
      eagle-trt serve out
      eagle-trt perf run out --dataset mt-bench --requests 20
    """
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":  # pragma: no cover
    main()

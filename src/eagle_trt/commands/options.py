"""Options several commands share: --base and --draft take a checkpoint directory or a hub id (eagle_trt.hub),
resolved once here so every later step reads a local directory."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import click

from eagle_trt.hub import resolve_checkpoint
from eagle_trt.tuning import TUNE_BUDGET_S


class CheckpointPath(click.ParamType):
    """A checkpoint directory, or `org/name[@revision]` resolved through the Hugging Face cache (or the hub)."""

    name = "DIR|ORG/NAME[@REV]"

    def __init__(self, what: str, must_exist: bool = False):
        self.what, self.must_exist = what, must_exist

    def convert(self, value, param, ctx) -> Path:
        if isinstance(value, Path):
            return value
        path = resolve_checkpoint(value, self.what)
        if self.must_exist and not path.is_dir():
            self.fail(f"{self.what} {value!r} is neither a directory nor a hub id (org/name[@revision])", param, ctx)
        return path


BASE = CheckpointPath("base", must_exist=False)
DRAFT = CheckpointPath("draft", must_exist=False)

tune_budget_option = click.option(
    "--tune-budget", "tune_budget", type=click.FloatRange(min=10.0), default=TUNE_BUDGET_S, show_default=True,
    help="--tree auto: at most this many seconds measuring (candidate trees not started by then are skipped).")


@contextmanager
def tuning_progress():
    """A progress bar on stderr for `--tree auto`'s measurement (tuning.calibrate.tune's `progress` callback)."""
    from tqdm import tqdm

    bar = None

    def update(done: int, total: int, what: str):
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, desc="tuning", unit="stage", file=sys.stderr, leave=False)
        bar.n = done
        bar.set_postfix_str(what, refresh=True)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()

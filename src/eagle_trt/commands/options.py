"""Options several commands share: --base and --draft take a checkpoint directory or a hub id (eagle_trt.hub),
resolved once here so every later step reads a local directory."""

from __future__ import annotations

from pathlib import Path

import click

from eagle_trt.hub import resolve_checkpoint


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

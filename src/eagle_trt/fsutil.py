"""Atomic output directories: build into a temporary sibling, rename at the end, remove it on any failure."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_directory(out: Path, *, label: str = "tmp") -> Iterator[Path]:
    """Yield a temporary sibling `.NAME.LABEL-*` of `out`; on success it replaces `out` (`replace_directory`), on
    failure (an exception, Ctrl-C, SystemExit) it is removed and `out` is left as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.{label}-", dir=out.parent))
    try:
        yield tmp
        replace_directory(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_directory(tmp: Path, out: Path) -> None:
    """Rename tmp to out; an existing out is moved aside first and removed only after the rename succeeded."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{tmp.name.rsplit('-', 1)[-1]}")
        out.rename(old)
    try:
        tmp.rename(out)
    except OSError:
        if old is not None:
            old.rename(out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

"""Tables the README holds between markers, produced by tests: the text between them, rewritten first when
EAGLE_TRT_WRITE_README is set (how a deliberate change refreshes the README)."""

from __future__ import annotations

import os
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_table(start: str, end: str, table: str) -> str:
    """The README's text between `start` and `end` (what a test compares with `table`); with
    EAGLE_TRT_WRITE_README=1, `table` is written there first."""
    text = README.read_text(encoding="utf-8")
    assert start in text and end in text, f"README.md lost its markers {start} / {end}"
    if os.environ.get("EAGLE_TRT_WRITE_README"):
        text = text[:text.index(start) + len(start)] + "\n" + table + text[text.index(end):]
        README.write_text(text, encoding="utf-8")
    return text[text.index(start) + len(start):text.index(end)].strip("\n") + "\n"

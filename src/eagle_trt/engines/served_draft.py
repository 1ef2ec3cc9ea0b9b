"""A draft in the layout an engine reads (`Engine.served_draft_change` says when one is needed): the same tensors
under the names that engine loads (`Engine.served_draft_name`) and a config it parses (`Engine.served_draft_config`),
written into the bundle (OUT/draft), so the serving container never meets a layout it misreads."""

from __future__ import annotations

import json
from pathlib import Path

from eagle_trt.checkpoints import open_weights
from eagle_trt.engines.engine import Engine
from eagle_trt.spec import DraftSpec


def write_served_draft(draft: DraftSpec, engine: Engine, out: Path) -> Path:
    """Write the copy into `out` (a directory inside the bundle being built)."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    with open_weights(draft.path) as reader:
        tensors = {engine.served_draft_name(draft, n): reader.get(n).contiguous() for n in reader.names()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(engine.served_draft_config(draft), indent=2) + "\n", encoding="utf-8")
    return out

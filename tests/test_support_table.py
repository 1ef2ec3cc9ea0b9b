"""The README's support table (family x draft layout x engine), produced here from the checks `inspect` and `build`
run: every cell is what eagle-trt does with that pair today, and every "runs" of the pytorch engine is run (EAGLE
output equal to plain decoding). The README must hold exactly this table; to refresh it after a deliberate change:

    EAGLE_TRT_WRITE_README=1 .venv/bin/pytest tests/test_support_table.py
"""

import json

import pytest

import builders
import hf_builders
import layout_builders
from readme_tables import readme_table
from eagle_trt.runtime import EagleDecoder
from eagle_trt.engines import NAMES as ENGINES, compatibility, get
from eagle_trt.spec import DraftSpec, ModelSpec

START, END = "<!-- support-table:start -->", "<!-- support-table:end -->"
FAMILIES = {"Llama 3.1 (transformers-5 config)": "llama31", "Mistral v0.1 (sliding window)": "mistral_v01",
            "Qwen2.5": "qwen25_tied", "Qwen3": "qwen3"}
LAYOUTS = {"SafeAILab EAGLE-1/2": ("eagle1", {}), "SafeAILab EAGLE-3": ("safeailab-eagle3", {}),
           "SpecForge": ("specforge", {}), "AngelSlim": ("angelslim", {}), "Model-Optimizer": ("modelopt", {}),
           "speculators": ("speculators", {}),
           "speculators, norm_before_residual": ("speculators", {"config": {"norm_before_residual": True}})}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("support")
    out = {}
    for fam_label, variant in FAMILIES.items():
        base = hf_builders.make_hf_base(root / variant, variant)
        e1 = builders.make_eagle1_draft(root / f"{variant}-e1", base)
        e3 = builders.make_eagle3_draft(root / f"{variant}-e3", base)
        for i, (lay_label, (layout, extra)) in enumerate(LAYOUTS.items()):
            draft = e1 if layout == "eagle1" else layout_builders.write_layout(
                e3, root / f"{variant}-{i}", layout, extra=extra, base=base)
            out[fam_label, lay_label] = (base, draft)
    return out


def render(pairs) -> tuple[str, list[tuple]]:
    """(the markdown table with its numbered refusals, the pytorch pairs to run)."""
    notes: dict[str, int] = {}
    rows = ["| base family | draft layout | " + " | ".join(f"`{e}`" for e in ENGINES) + " |",
            "|---|---|" + "---|" * len(ENGINES)]
    to_run = []
    for (fam_label, lay_label), (base_dir, draft_dir) in pairs.items():
        base, draft = ModelSpec.from_dir(base_dir), DraftSpec.from_dir(draft_dir)
        cells = []
        for engine in ENGINES:
            problems = compatibility(base, draft, engine)
            if problems:
                number = notes.setdefault(problems[0].message, len(notes) + 1)
                cells.append(f"refused ({number})")
            else:
                cells.append("runs, draft rewritten" if get(engine).served_draft_change(draft) else "runs")
                if engine == "pytorch":
                    to_run.append((base_dir, draft_dir))
        rows.append(f"| {fam_label} | {lay_label} | " + " | ".join(cells) + " |")
    footnotes = [f"({n}) {message}" for message, n in notes.items()]
    return "\n".join(rows) + "\n\n" + "\n".join(f"{line}  " for line in footnotes).rstrip() + "\n", to_run


def test_the_readme_table_is_what_the_checks_say(pairs):
    table, to_run = render(pairs)
    current = readme_table(START, END, table)
    assert current == table, "README.md's support table is stale: see this module's docstring to refresh it"
    assert len(to_run) == len(FAMILIES) * len(LAYOUTS)  # the pytorch engine runs every pair
    for base_dir, draft_dir in to_run:
        prompt = list(range(5, 45))
        plain = EagleDecoder.load(base_dir, None).generate_all(prompt, 16).token_ids
        assert EagleDecoder.load(base_dir, draft_dir, tree="chain:3").generate_all(prompt, 16).token_ids == plain, \
            (base_dir.name, json.loads((draft_dir / "config.json").read_text()).get("architectures"))

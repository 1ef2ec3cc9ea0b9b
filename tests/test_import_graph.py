"""scripts/import_graph.py: eagle_trt's imports point down (no module cycle, no upward or sideways import), and
the checker itself catches both kinds of fault."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "import_graph.py"
SRC = Path(__file__).resolve().parent.parent / "src" / "eagle_trt"


def run(src: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(src)], capture_output=True, text=True, timeout=60)


def test_the_package_imports_point_down():
    result = run(SRC)
    assert result.returncode == 0, result.stdout
    assert "no cycle, no upward import" in result.stdout
    assert " commands          -> " in result.stdout


def test_a_cycle_and_an_upward_import_are_reported(tmp_path):
    pkg = tmp_path / "eagle_trt"
    (pkg / "checkpoints").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "checkpoints" / "__init__.py").write_text("")
    (pkg / "checkpoints" / "a.py").write_text("from eagle_trt.checkpoints.b import x\n")
    (pkg / "checkpoints" / "b.py").write_text("def f():\n    from eagle_trt.checkpoints import a\n")
    (pkg / "spec.py").write_text("from eagle_trt.commands.build import y\n")
    (pkg / "commands").mkdir()
    (pkg / "commands" / "build.py").write_text("y = 1\n")
    result = run(pkg)
    assert result.returncode == 1
    assert "module cycle: eagle_trt.checkpoints.a -> eagle_trt.checkpoints.b -> eagle_trt.checkpoints.a" in result.stdout
    assert "eagle_trt.spec -> eagle_trt.commands.build: upward import" in result.stdout

"""Which engine a TensorRT-LLM release can serve a draft with (docs/trtllm_formats.md §7): the engine path
(trtllm-build, the tensorrtllm backend) exists up to 1.2; newer releases run EAGLE-3 drafts through the LLM API only.

The TensorRT-LLM here is a stand-in distribution on disk (`tensorrt_llm/__init__.py` + `tensorrt_llm-<v>.dist-info/
METADATA`) put on sys.path, with or without a `trtllm-build` executable on PATH, so the real importlib.metadata
lookup and PATH search run."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from eagle_trt.engines import create_spec, trtllm_build as trtllm
from eagle_trt.build.bundle import plan_build
from eagle_trt.engines.trtllm_install import TrtllmInstall
from eagle_trt.cli import main
from eagle_trt.errors import EagleTrtError

NO_ENGINE_PATH = "cannot serve"


@pytest.fixture
def install_trtllm(tmp_path, monkeypatch):
    """install_trtllm(version, trtllm_build=True) -> TrtllmInstall as detected afterwards."""
    def make(version: str, trtllm_build: bool = True) -> TrtllmInstall:
        site = tmp_path / f"site-{version}"
        (site / "tensorrt_llm").mkdir(parents=True)
        (site / "tensorrt_llm" / "__init__.py").write_text(f'__version__ = "{version}"\n')
        info = site / f"tensorrt_llm-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: {version}\n")
        monkeypatch.syspath_prepend(str(site))
        bin_dir = tmp_path / f"bin-{version}-{trtllm_build}"
        bin_dir.mkdir()
        if trtllm_build:
            exe = bin_dir / "trtllm-build"
            exe.write_text("#!/bin/sh\nexit 0\n")
            exe.chmod(0o755)
        monkeypatch.setenv("PATH", str(bin_dir))
        return TrtllmInstall.detect()
    return make


def test_the_stand_in_is_what_detect_reads(install_trtllm):
    inst = install_trtllm("1.3.0rc2", trtllm_build=False)
    assert inst.version == "1.3.0rc2" and inst.release == (1, 3) and inst.trtllm_build is None
    assert not inst.has_engine_path and "no engine path" in inst.describe()
    old = install_trtllm("1.2.0rc6")
    assert old.release == (1, 2) and Path(old.trtllm_build).name == "trtllm-build" and old.has_engine_path


def test_nothing_installed(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    inst = TrtllmInstall.detect()
    assert not inst.installed and not inst.has_engine_path and inst.to_dict()["version"] is None


# (version, trtllm-build on PATH) -> engine for (auto, EAGLE-1/2), (auto, EAGLE-3), (auto, no draft),
# (trtllm, EAGLE-1/2), (llmapi, EAGLE-3); None = the no-engine-path error
CASES = [
    ("1.0.0", True, "trtllm", "llmapi", "trtllm", "trtllm", "llmapi"),
    ("1.2.0", True, "trtllm", "llmapi", "trtllm", "trtllm", "llmapi"),
    ("1.2.0", False, None, "llmapi", "llmapi", None, "llmapi"),  # a 1.2 without its trtllm-build
    ("1.3.0", False, None, "llmapi", "llmapi", None, "llmapi"),
    ("1.3.0", True, None, "llmapi", "llmapi", None, "llmapi"),  # a stray trtllm-build does not bring it back
]


@pytest.mark.parametrize("version, has_build, auto1, auto3, auto0, trtllm1, llmapi3", CASES)
def test_routing(install_trtllm, tiny_base, eagle1_draft, eagle3_draft, tmp_path, version, has_build, auto1, auto3,
                 auto0, trtllm1, llmapi3):
    install_trtllm(version, has_build)

    def engine(draft, choice):
        try:
            return plan_build(tiny_base, draft, tmp_path / "out", engine=choice, device="cuda").spec.engine
        except EagleTrtError as exc:
            assert NO_ENGINE_PATH in exc.message and "--format eagle3" in exc.hint and "<= 1.2" in exc.hint
            assert "--engine pytorch" in exc.hint
            return None

    assert engine(eagle1_draft, "auto") == auto1
    assert engine(eagle3_draft, "auto") == auto3
    assert engine(None, "auto") == auto0
    assert engine(eagle1_draft, "trtllm") == trtllm1
    assert engine(eagle3_draft, "llmapi") == llmapi3
    assert engine(eagle1_draft, "pytorch") == "pytorch"  # our runtime runs everywhere
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("version", ["1.0.0", "1.3.0"])
def test_drafts_an_engine_never_takes(install_trtllm, tiny_base, eagle1_draft, eagle3_draft, tmp_path, version):
    install_trtllm(version, trtllm_build=version == "1.0.0")
    with pytest.raises(EagleTrtError, match="runs EAGLE-3 drafts only") as err:
        plan_build(tiny_base, eagle1_draft, tmp_path / "o", engine="llmapi", device="cuda")
    assert "--format eagle3" in err.value.hint
    with pytest.raises(EagleTrtError, match="EAGLE-3 drafts are not supported|has no TensorRT engine path"):
        plan_build(tiny_base, eagle3_draft, tmp_path / "o", engine="trtllm", device="cuda")


def test_auto_without_a_gpu_or_trtllm_is_pytorch(install_trtllm, tiny_base, eagle1_draft, tmp_path, monkeypatch):
    assert plan_build(tiny_base, eagle1_draft, tmp_path / "o", device="cpu").spec.engine == "pytorch"
    monkeypatch.setenv("PATH", "/nonexistent")
    assert plan_build(tiny_base, eagle1_draft, tmp_path / "o", device="cuda").spec.engine == "pytorch"


def test_cli_stops_before_any_heavy_work(install_trtllm, tiny_base, eagle1_draft, tmp_path):
    install_trtllm("1.3.0", trtllm_build=False)
    out = tmp_path / "bundle"
    for engine in ("trtllm", "auto"):
        res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                        str(out), "--engine", engine, "--device", "cuda"])
        assert res.exit_code == 1, res.output
        assert "TensorRT-LLM 1.3.0 has no TensorRT engine path" in res.output and "--format eagle3" in res.output
        assert not out.exists() and not list(tmp_path.glob(".bundle.building-*"))


def test_engine_build_refuses_a_new_trtllm_before_converting(install_trtllm, tiny_base, eagle1_draft, tmp_path):
    spec = create_spec(tiny_base, eagle1_draft, engine="trtllm", dtype="float16")
    install_trtllm("1.3.0", trtllm_build=False)
    with pytest.raises(EagleTrtError, match="has no TensorRT engine path"):
        trtllm.build_trtllm_engines(spec, tmp_path / "b")
    assert not (tmp_path / "b" / "checkpoint").exists()


def test_old_trtllm_without_trtllm_build(install_trtllm, tiny_base, eagle1_draft, tmp_path):
    install_trtllm("1.1.0", trtllm_build=False)
    with pytest.raises(EagleTrtError, match="trtllm-build is not on PATH"):
        plan_build(tiny_base, eagle1_draft, tmp_path / "o", engine="trtllm", device="cuda")

"""OUT/deploy/: the Kubernetes manifests and the Grafana dashboard `eagle-trt build` writes, checked by real tools.

- kubectl 1.20 (Debian's kubernetes-client; kustomize v2.0.3) renders every engine's overlay. It is found at
  $EAGLE_TRT_KUBECTL, else .tools/kubectl-1.20/usr/bin/kubectl (`make kubectl` unpacks it there), else
  /opt/k8s-1.20/usr/bin/kubectl; the test fails, saying so, when none is kubectl 1.20.
- kubernetes-validate (strict: unknown fields fail) checks every core object against the Kubernetes 1.37.0 and
  1.26.0 schemas; PodMonitor and PrometheusRule are checked against cloudcoil-models-prometheus-operator (pydantic
  models generated from prometheus-operator's CRDs; a round trip catches fields the CRD does not have).
- promql-parser parses every PromQL expression of the dashboard and the rule; each metric it names must be one of
  `eagle_trt.metrics` (or a series the rule records).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from eagle_trt import metrics as M
from eagle_trt.engines.trtllm_backend import BACKEND_OLDEST, ENGINE_PATH_LAST
from eagle_trt.build_spec import SPEC_FILE, BuildSpec
from eagle_trt.cli import main
from eagle_trt.deploy import DASHBOARD_FILE, DeployOptions, check_bundle, write_deploy
from eagle_trt.engines.images import TRTLLM_CONTAINERS
from eagle_trt.deploy.observability import grafana_dashboard, prometheus_rule_groups, promql_exprs

REPO = Path(__file__).resolve().parents[1]
KUBECTL_PLACES = (os.environ.get("EAGLE_TRT_KUBECTL"), REPO / ".tools/kubectl-1.20/usr/bin/kubectl",
                  "/opt/k8s-1.20/usr/bin/kubectl")
K8S_VERSIONS = ("1.37.0", "1.26.0")  # the newest schema kubernetes-validate 1.37.0 ships; autoscaling/v2 is GA since 1.23
CORE_KINDS = {"ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
CRD_KINDS = {"PodMonitor", "PrometheusRule"}


def kubectl_1_20() -> str:
    for place in filter(None, KUBECTL_PLACES):
        if Path(place).is_file():
            out = subprocess.run([str(place), "version", "--client"], capture_output=True, text=True).stdout
            if 'Minor:"20"' in out:
                return str(place)
    pytest.fail(f"no kubectl 1.20 at {[str(p) for p in KUBECTL_PLACES if p]}: run `make kubectl` (Debian's "
                "kubernetes-client unpacked into .tools/) or set EAGLE_TRT_KUBECTL")


def _build(base, out, *args):
    res = CliRunner().invoke(main, ["build", "--base", str(base), "-o", str(out), *map(str, args)])
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def bundles(tiny_base, eagle1_draft, eagle3_draft, tmp_path_factory):
    """{engine: bundle dir} for every engine kind (trtllm, llmapi as their dry runs, which write the bundle)."""
    root = tmp_path_factory.mktemp("deploy")
    return {
        "pytorch": _build(tiny_base, root / "pytorch", "--draft", eagle1_draft, "--engine", "pytorch", "--tree",
                          "chain:3", "--max-seq-len", "512", "--k8s-replicas", "2", "--k8s-pvc", "models"),
        "trtllm": _build(tiny_base, root / "trtllm", "--draft", eagle1_draft, "--engine", "trtllm", "--dry-run",
                         "--tp", "2", "--backend-version", "0.19"),
        "llmapi": _build(tiny_base, root / "llmapi", "--draft", eagle3_draft, "--engine", "llmapi", "--dry-run",
                         "--k8s-openai-port", "9000"),
        "vllm": _build(tiny_base, root / "vllm", "--draft", eagle3_draft, "--engine", "vllm", "--tree", "chain:3"),
    }


def _render(kubectl: str, overlay: Path) -> dict[str, dict]:
    res = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(res.stdout)}


@pytest.fixture(scope="module")
def rendered(bundles):
    kubectl = kubectl_1_20()
    return {engine: _render(kubectl, out / "deploy/kubernetes/overlays" / engine) for engine, out in bundles.items()}


def _triton(objects: dict) -> tuple[dict, dict]:
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "triton")


def test_kubectl_1_20_renders_every_overlay(rendered, bundles):
    expected_images = {"pytorch": "eagle-trt-triton:26.07-py3",
                       # derived: our pre/postprocessing and acceptance steps import eagle-trt
                       "trtllm": "eagle-trt-triton:25.05-trtllm-python-py3",  # TensorRT-LLM 0.19.0
                       "llmapi": "eagle-trt-triton:26.07-trtllm-python-py3",
                       "vllm": "nvcr.io/nvidia/tritonserver:26.08-vllm-python-py3"}
    for engine, objects in rendered.items():
        assert set(objects) == CORE_KINDS | CRD_KINDS, engine
        pod, triton = _triton(objects)
        assert triton["image"] == expected_images[engine] and pod["initContainers"][0]["image"] == triton["image"]
        check = pod["initContainers"][0]
        assert check["command"][-1] == str(bundles[engine].resolve()) and check["args"][:2] == ["--engine", engine]
        volume = next(v for v in pod["volumes"] if "configMap" in v)
        assert volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]  # the generated, hashed name
        assert {p["httpGet"]["path"] for p in (triton["livenessProbe"], triton["readinessProbe"])} == {
            "/v2/health/live", "/v2/health/ready"}
        assert triton["startupProbe"]["failureThreshold"] * triton["startupProbe"]["periodSeconds"] >= 600
        gpus = triton["resources"]["limits"].get("nvidia.com/gpu", 0)
        assert gpus == {"pytorch": 0, "trtllm": 2, "llmapi": 1, "vllm": 1}[engine]  # = the bundle's TP size
        assert objects["PodMonitor"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        assert {p["name"]: p["containerPort"] for p in triton["ports"]}["metrics"] == 8002
    pytorch = rendered["pytorch"]
    assert pytorch["Deployment"]["spec"]["replicas"] == 2 and pytorch["HorizontalPodAutoscaler"]["spec"][
        "minReplicas"] == 2
    pod, triton = _triton(pytorch)
    assert next(v for v in pod["volumes"] if v["name"] == "bundle")["persistentVolumeClaim"]["claimName"] == "models"
    assert triton["command"][0] == "tritonserver" and "--load-model=eagle_model" in triton["command"]
    _, trt = _triton(rendered["trtllm"])
    assert trt["command"][:2] == ["mpirun", "--allow-run-as-root"] and trt["command"].count("tritonserver") == 2
    assert rendered["trtllm"]["Deployment"]["spec"]["template"]["spec"]["initContainers"][0]["args"] == [
        "--engine", "trtllm", "--backend-version", "0.19"]
    _, llm = _triton(rendered["llmapi"])
    assert llm["command"][:2] == ["eagle-trt", "serve"] and "--openai-port" in llm["command"]
    assert {p["name"] for p in rendered["llmapi"]["Service"]["spec"]["ports"]} == {"http", "grpc", "metrics",
                                                                                    "openai"}
    assert {p["name"] for p in rendered["pytorch"]["Service"]["spec"]["ports"]} == {"http", "grpc", "metrics"}
    hpa = rendered["vllm"]["HorizontalPodAutoscaler"]["spec"]
    assert hpa["metrics"][0]["pods"]["metric"]["name"] == "triton:queue_compute:ratio"


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_core_objects_validate_against_the_kubernetes_schema(rendered, version):
    import kubernetes_validate

    for engine, objects in rendered.items():
        for kind in CORE_KINDS:
            kubernetes_validate.validate(objects[kind], version, strict=True)
    broken = json.loads(json.dumps(rendered["pytorch"]["Deployment"]))
    broken["spec"]["replica"] = broken["spec"].pop("replicas")  # a typo the validator must catch
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def test_monitoring_objects_match_the_prometheus_operator_crds(rendered):
    from cloudcoil.models.prometheus_operator import v1

    for objects in rendered.values():
        for kind in CRD_KINDS:
            obj = objects[kind]
            assert getattr(v1, kind).model_validate(obj).model_dump(by_alias=True, exclude_none=True) == obj
    odd = json.loads(json.dumps(rendered["pytorch"]["PodMonitor"]))
    odd["spec"]["podMetricsEndpoints"][0]["intervall"] = "6s"  # not a CRD field: dropped, so the round trip differs
    assert v1.PodMonitor.model_validate(odd).model_dump(by_alias=True, exclude_none=True) != odd


GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$model": "eagle_model|base_model"}  # interpolated as Grafana does


def _metric_names(expr: str) -> set[str]:
    import promql_parser

    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    names = set()
    promql_parser.walk(promql_parser.parse(expr),
                       lambda node: names.add(node.name) if isinstance(node, promql_parser.VectorSelector) else None)
    return names


def _unknown_metrics(exprs, recorded) -> set[str]:
    """Names that are neither in eagle_trt.metrics (histograms with their _bucket/_sum/_count) nor recorded."""
    specs = [v for v in vars(M).values() if isinstance(v, M.MetricSpec)]
    known = {s.name for s in specs} | set(M.TRITON_METRICS) | set(recorded)
    histograms = {s.name for s in specs if s.kind == "histogram"} | {n for n in M.TRITON_METRICS if "histogram" in n}
    known |= {f"{h}_{part}" for h in histograms for part in ("bucket", "sum", "count")}
    return {name for expr in exprs for name in _metric_names(expr)} - known


def test_every_promql_expression_names_only_metrics_from_the_module(bundles, rendered):
    dashboard = json.loads((bundles["pytorch"] / "deploy" / DASHBOARD_FILE).read_text())
    for engine, objects in rendered.items():
        groups = objects["PrometheusRule"]["spec"]["groups"]
        recorded = {r["record"] for g in groups for r in g["rules"]}
        exprs = promql_exprs(dashboard, groups)
        assert len(exprs) >= 10 and _unknown_metrics(exprs, recorded) == set(), engine
        used = {n for e in exprs for n in _metric_names(e)}
        assert {M.OUTPUT_TOKENS.name, M.ACCEPTED_DRAFT_TOKENS.name, "nv_inference_queue_duration_us",
                "nv_inference_first_response_histogram_ms_bucket"} <= used
    assert _unknown_metrics(["rate(eagle_trt_output_tokens[1m])"], set()) == {"eagle_trt_output_tokens"}


def test_dashboard_covers_throughput_latency_queue_and_acceptance(bundles):
    dashboard = json.loads((bundles["trtllm"] / "deploy" / DASHBOARD_FILE).read_text())
    assert dashboard == json.loads(json.dumps(grafana_dashboard(dashboard["title"])))  # structural: what we build
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels) and all(p["targets"] for p in panels)
    titles = " ".join(p["title"] for p in panels)
    for word in ("tokens/s", "TTFT", "ITL", "Queue time", "acceptance"):
        assert word in titles
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])


def test_image_table_covers_every_supported_backend_release():
    minors = {(0, m) for m in range(BACKEND_OLDEST[1], 22)} | {(1, m) for m in range(ENGINE_PATH_LAST[1] + 1)}
    assert set(TRTLLM_CONTAINERS) == minors
    for (major, minor), (tag, exact) in TRTLLM_CONTAINERS.items():
        assert exact.startswith(f"{major}.{minor}.") and len(tag) == 5 and tag[2] == "."


def test_the_init_check_passes_a_whole_bundle_and_names_what_is_missing(bundles, tmp_path):
    def check(bundle, *args):
        return subprocess.run([sys.executable, check_bundle.__file__, str(bundle), *args], capture_output=True,
                              text=True)

    ok = check(bundles["pytorch"], "--engine", "pytorch")
    assert ok.returncode == 0 and "bundle OK" in ok.stdout
    assert check_bundle.SPEC_FILE == SPEC_FILE
    wrong = check(bundles["pytorch"], "--engine", "trtllm")
    assert wrong.returncode == 1 and "overlays/pytorch" in wrong.stderr
    engines = check(bundles["trtllm"], "--engine", "trtllm", "--backend-version", "0.19")  # a dry run: no engines
    assert engines.returncode == 1 and "rank1.engine" in engines.stderr and "build_engines.sh" in engines.stderr
    version = check(bundles["trtllm"], "--engine", "trtllm", "--backend-version", "1.2")
    assert version.returncode == 1 and "TensorRT-LLM 0.19" in version.stderr
    moved = tmp_path / "moved"  # the base no longer where the build read it
    shutil.copytree(bundles["pytorch"], moved)
    listed = moved / "deploy" / check_bundle.REQUIRED_PATHS_FILE
    paths = json.loads(listed.read_text())
    for entry in paths["paths"]:
        if entry["what"] == "base model directory":
            entry["path"] = str(tmp_path / "not-here")
    listed.write_text(json.dumps(paths))
    gone = check(moved, "--engine", "pytorch")
    assert gone.returncode == 1 and f"missing base model directory: {tmp_path / 'not-here'}" in gone.stderr
    assert check(tmp_path / "nothing", "--engine", "pytorch").returncode == 1


def test_pytorch_on_a_gpu_requests_one_and_the_cpu_none(bundles, tmp_path):
    spec = BuildSpec.load(bundles["pytorch"])
    for device, gpus in (("cuda", 1), ("cpu", 0)):
        out = tmp_path / device
        write_deploy(dataclasses.replace(spec, device=device), out, bundles["pytorch"], DeployOptions())
        values = list(yaml.safe_load_all((out / "deploy/kubernetes/overlays/pytorch/values.yaml").read_text()))
        limits = values[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits.get("nvidia.com/gpu", 0) == gpus
        assert "FROM nvcr.io/nvidia/tritonserver:26.07-py3" in (out / "deploy/image/Dockerfile").read_text()
    assert prometheus_rule_groups(["eagle_engine"])[0]["rules"][0]["expr"].count('model=~"eagle_engine"') == 2


def test_every_derived_image_installs_eagle_trt_once(bundles, tmp_path):
    """Our python models import eagle_trt: every bundle whose Triton runs them builds a derived image that installs it
    once; vLLM's runs none (its own image), unless the OpenAI route needs eagle-trt in front."""
    for engine, bundle in bundles.items():
        dockerfile = bundle / "deploy/image/Dockerfile"
        assert dockerfile.exists() == (engine != "vllm"), engine
        if engine != "vllm":
            assert dockerfile.read_text().count("/opt/eagle-trt") == 2, engine  # COPY, then one install
    spec = BuildSpec.load(bundles["vllm"])
    write_deploy(spec, tmp_path / "vllm", bundles["vllm"], DeployOptions(openai_port=9000))
    text = (tmp_path / "vllm/deploy/image/Dockerfile").read_text()
    assert "FROM nvcr.io/nvidia/tritonserver:26.08-vllm-python-py3" in text and text.count("/opt/eagle-trt") == 2


@pytest.mark.parametrize("args, message", [
    (["--k8s-pvc", "Bundle_PVC"], "is not a valid PersistentVolumeClaim name"),
    (["--k8s-openai-port", "8002"], "is not a free port of the pod"),
    (["--k8s-replicas", "3", "--k8s-max-replicas", "2"], "need 1 <= replicas <= max-replicas"),
])
def test_bad_kubernetes_options_stop_the_build_with_a_clear_error(tiny_base, eagle1_draft, tmp_path, args,
                                                                 message):
    res = CliRunner().invoke(main, ["build", "--base", str(tiny_base), "--draft", str(eagle1_draft), "-o",
                                    str(tmp_path / "b"), "--engine", "pytorch", "--tree", "chain:2", *args])
    assert res.exit_code == 1 and message in res.output and "hint:" in res.output
    assert not (tmp_path / "b").exists()

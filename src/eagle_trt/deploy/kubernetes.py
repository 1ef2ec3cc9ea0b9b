"""The Kubernetes objects that serve a bundle, as Python dicts (dumped to YAML by `eagle_trt.deploy`).

A kustomize base holds what every engine kind shares (Deployment skeleton with the bundle check, probes and
volumes; Service; PodDisruptionBudget; HorizontalPodAutoscaler; PodMonitor; PrometheusRule) and one overlay per
engine kind holds that kind's container (image, command, GPUs, startup budget) in `engine.yaml` and what a user
sets in `values.yaml` (replicas, image, the volume's claim, resources, autoscaling bounds). Kustomizations use only
fields kustomize v2.0.3 (kubectl 1.20) knows: resources, bases, patchesStrategicMerge, configMapGenerator.

Probes and ports follow Triton (HTTP 8000 /v2/health/live and /v2/health/ready, gRPC 8001, metrics 8002) and
triton-inference-server/tutorials' TensorRT-LLM_Autoscaling_and_Load_Balancing chart (probes, the /dev/shm
volume, the GPU toleration, the HPA on triton:queue_compute:ratio, the PodMonitor on the metrics port).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eagle_trt.build_spec import BuildSpec
from eagle_trt.deploy.observability import QUEUE_COMPUTE_RATIO, TRITON_METRICS_CONFIG, prometheus_rule_groups
from eagle_trt.engines import get
from eagle_trt.spec import MODELS

NAME = "eagle-trt"
TRITON_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}  # tritonserver's defaults
OPENAI_PORT_NAME = "openai"
SELECTOR = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "server"}
MONITORING_LABELS = {"release": "prometheus"}  # kube-prometheus-stack's default rule/monitor selector
CHECK_CONFIGMAP = f"{NAME}-check"
CHECK_DIR = "/opt/eagle-trt-check"
CHECK_SCRIPT = "check_bundle.py"
CONTAINER = "triton"
GPU = "nvidia.com/gpu"
PROBE_PERIOD_S = 10
HPA_TARGET = "1"  # queue time = compute time: the tutorial's 1000m


@dataclass(frozen=True)
class PodPlan:
    """What the objects need beyond the spec: the bundle's path, where the volume mounts, the image, options."""

    bundle: Path  # the bundle's absolute path, in the pod as at build time
    mount_path: Path  # where the volume mounts (a parent of every path the bundle reads)
    image: str
    claim: str
    replicas: int
    max_replicas: int
    openai_port: int | None


def _meta(name: str, **labels: str) -> dict:
    return {"name": name, "labels": {**SELECTOR, **labels}}


def _serve_command(spec: BuildSpec, plan: PodPlan) -> list[str]:
    """tritonserver on the bundle's repository (mpirun, one rank per GPU, for a trtllm bundle with TP > 1, as
    tensorrtllm_backend's scripts/launch_triton_server.py does); `eagle-trt serve` when the OpenAI route is asked."""
    ports = TRITON_PORTS
    if plan.openai_port is not None:
        return ["eagle-trt", "serve", str(plan.bundle), "--host", "0.0.0.0", "--http-port", str(ports["http"]),
                "--grpc-port", str(ports["grpc"]), "--metrics-port", str(ports["metrics"]),
                "--openai-port", str(plan.openai_port)]
    server = ["tritonserver", f"--model-repository={plan.bundle / 'model_repository'}",
              "--model-control-mode=explicit", *(f"--load-model={m}" for m in MODELS),
              f"--http-port={ports['http']}", f"--grpc-port={ports['grpc']}", f"--metrics-port={ports['metrics']}",
              f"--metrics-config={TRITON_METRICS_CONFIG}"]
    ranks = get(spec.engine).triton_ranks(spec)
    if ranks == 1:
        return server
    command = ["mpirun", "--allow-run-as-root"]
    for rank in range(ranks):
        command += ["-n", "1", *server, "--disable-auto-complete-config",
                    f"--backend-config=python,shm-region-prefix-name=prefix{rank}_"]
        command += [":"] if rank < ranks - 1 else []
    return command


def engine_models(spec: BuildSpec) -> list[str]:
    """The models requests queue in (the engine kind says: its engine models, or the vLLM models themselves)."""
    return get(spec.engine).queue_models()


def _probe(path: str, period: int, failures: int) -> dict:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures,
            "timeoutSeconds": 5}


# ---- base -------------------------------------------------------------------------------------------------------
def deployment(plan: PodPlan) -> dict:
    """The engine-neutral Deployment: bundle check, the Triton container's ports and probes, the volumes."""
    bundle_mount = {"name": "bundle", "mountPath": str(plan.mount_path), "readOnly": True}
    ports = [{"name": name, "containerPort": port} for name, port in TRITON_PORTS.items()]
    container = {
        "name": CONTAINER, "image": plan.image, "imagePullPolicy": "IfNotPresent", "ports": ports,
        "livenessProbe": _probe("/v2/health/live", PROBE_PERIOD_S, 3),
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "volumeMounts": [bundle_mount, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    check = {
        "name": "check-bundle", "image": plan.image, "imagePullPolicy": "IfNotPresent",
        "command": ["python3", f"{CHECK_DIR}/{CHECK_SCRIPT}", str(plan.bundle)],
        "volumeMounts": [bundle_mount, {"name": "check", "mountPath": CHECK_DIR, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(NAME),
        "spec": {
            "replicas": plan.replicas, "selector": {"matchLabels": dict(SELECTOR)},
            "template": {
                "metadata": {"labels": dict(SELECTOR)},
                "spec": {
                    "initContainers": [check], "containers": [container], "terminationGracePeriodSeconds": 30,
                    "volumes": [
                        {"name": "bundle", "persistentVolumeClaim": {"claimName": plan.claim, "readOnly": True}},
                        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}},
                        {"name": "check", "configMap": {"name": CHECK_CONFIGMAP}},
                    ],
                },
            },
        },
    }


def service(plan: PodPlan) -> dict:
    ports = [{"name": name, "port": port, "targetPort": name} for name, port in TRITON_PORTS.items()]
    if plan.openai_port is not None:
        ports.append({"name": OPENAI_PORT_NAME, "port": plan.openai_port, "targetPort": OPENAI_PORT_NAME})
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(NAME),
            "spec": {"type": "ClusterIP", "selector": dict(SELECTOR), "ports": ports}}


def disruption_budget() -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(NAME),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": dict(SELECTOR)}}}


def autoscaler(plan: PodPlan) -> dict:
    """autoscaling/v2 on the per-pod queue:compute ratio (a custom metric: prometheus-adapter serves it)."""
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": _meta(NAME),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME},
            "minReplicas": plan.replicas, "maxReplicas": plan.max_replicas,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": QUEUE_COMPUTE_RATIO},
                                                  "target": {"type": "AverageValue", "averageValue": HPA_TARGET}}}],
        },
    }


def pod_monitor() -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
            "metadata": _meta(NAME, **MONITORING_LABELS),
            "spec": {"selector": {"matchLabels": dict(SELECTOR)},
                     "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "6s"}]}}


def prometheus_rule(spec: BuildSpec) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": _meta(NAME, **MONITORING_LABELS),
            "spec": {"groups": prometheus_rule_groups(engine_models(spec))}}


def base_objects(spec: BuildSpec, plan: PodPlan) -> dict[str, dict]:
    """{file name: object} of the kustomize base."""
    return {"deployment.yaml": deployment(plan), "service.yaml": service(plan), "pdb.yaml": disruption_budget(),
            "hpa.yaml": autoscaler(plan), "podmonitor.yaml": pod_monitor(), "prometheusrule.yaml": prometheus_rule(spec)}


# ---- overlay ----------------------------------------------------------------------------------------------------
def _patch(containers: list[dict], **pod_spec) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": NAME},
            "spec": {"template": {"spec": {"containers": containers, **pod_spec}}}}


def engine_patch(spec: BuildSpec, plan: PodPlan) -> dict:
    """The engine kind's container: command, the bundle check's arguments, the startup budget, the OpenAI port,
    the GPU toleration. GPUs themselves are in values.yaml (resources)."""
    engine = get(spec.engine)
    check_args = ["--engine", spec.engine]
    if spec.backend_version is not None:
        check_args += ["--backend-version", spec.backend_version]
    container = {"name": CONTAINER, "command": _serve_command(spec, plan),
                 "startupProbe": _probe("/v2/health/ready", PROBE_PERIOD_S, engine.startup_budget_s // PROBE_PERIOD_S)}
    if plan.openai_port is not None:
        container["ports"] = [{"name": OPENAI_PORT_NAME, "containerPort": plan.openai_port}]
    pod = {"initContainers": [{"name": "check-bundle", "args": check_args}]}
    if uses_gpu(spec):
        pod["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
    return _patch([container], **pod)


def uses_gpu(spec: BuildSpec) -> bool:
    return get(spec.engine).uses_gpu(spec)


def values_patch(spec: BuildSpec, plan: PodPlan) -> list[dict]:
    """What a user sets, in one file: replicas, the image, the volume's claim, resources, autoscaling bounds."""
    gpus = spec.tp_size if uses_gpu(spec) else 0
    amount = {"cpu": "4", "memory": "32Gi"} if gpus else {"cpu": "2", "memory": "8Gi"}
    limits = {"memory": amount["memory"], **({GPU: gpus} if gpus else {})}
    deployment_values = _patch(
        [{"name": CONTAINER, "image": plan.image, "resources": {"requests": {**amount, **({GPU: gpus} if gpus else {})},
                                                                 "limits": limits}}],
        initContainers=[{"name": "check-bundle", "image": plan.image}],
        volumes=[{"name": "bundle", "persistentVolumeClaim": {"claimName": plan.claim, "readOnly": True}}])
    deployment_values["spec"]["replicas"] = plan.replicas
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": NAME},
           "spec": {"minReplicas": plan.replicas, "maxReplicas": plan.max_replicas}}
    return [deployment_values, hpa]


def kustomizations(base_files: list[str]) -> tuple[dict, dict]:
    """(the base's kustomization.yaml, the overlay's), kustomize v2.0.3 fields only."""
    base = {"resources": list(base_files),
            "configMapGenerator": [{"name": CHECK_CONFIGMAP, "files": [CHECK_SCRIPT]}]}
    overlay = {"bases": ["../../base"], "patchesStrategicMerge": ["engine.yaml", "values.yaml"]}
    return base, overlay

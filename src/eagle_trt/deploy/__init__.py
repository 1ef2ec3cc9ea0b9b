"""OUT/deploy/: what it takes to run a bundle at scale on Kubernetes, written by `eagle-trt build`.

```
deploy/
  README.md                       this bundle's image, paths and steps
  kubernetes/base/                Deployment, Service, PodDisruptionBudget, HPA, PodMonitor, PrometheusRule,
                                  check_bundle.py (the init step) and kustomization.yaml
  required_paths.json             what the served bundle reads (the engine says), which check_bundle.py checks
  kubernetes/overlays/<engine>/   kustomization.yaml, engine.yaml (this engine's container), values.yaml (yours)
  grafana/eagle-trt.json          the dashboard: tok/s, TTFT/ITL, queue time, acceptance
  image/Dockerfile                (a derived image: every engine but vllm, or the OpenAI route) the image the user builds
```
Every object is a Python dict dumped with PyYAML (deploy/kubernetes.py); the metric names come from
`eagle_trt.metrics` (deploy/observability.py). docs/kubernetes.md is the guide.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from eagle_trt.build_spec import BuildSpec
from eagle_trt.deploy import kubernetes as K
from eagle_trt.deploy.check_bundle import REQUIRED_PATHS_FILE
from eagle_trt.deploy.images import dockerfile, serving_image
from eagle_trt.deploy.observability import grafana_dashboard
from eagle_trt.engines import get
from eagle_trt.engines.engine import RequiredPath
from eagle_trt.errors import EagleTrtError

DEPLOY_DIR = "deploy"
DASHBOARD_FILE = "grafana/eagle-trt.json"
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label, what a claim name must be


@dataclass(frozen=True)
class DeployOptions:
    """`eagle-trt build --k8s-*`: the volume holding the bundle, replicas, the OpenAI port, an image override."""

    pvc: str = "eagle-trt-bundle"
    replicas: int = 1
    max_replicas: int = 4
    openai_port: int | None = None
    image: str | None = None

    def validate(self) -> None:
        if not _DNS_NAME.match(self.pvc):
            raise EagleTrtError(f"--k8s-pvc {self.pvc!r} is not a valid PersistentVolumeClaim name",
                                "use lower-case letters, digits and '-', at most 63, starting and ending alphanumeric")
        if self.replicas < 1 or self.max_replicas < self.replicas:
            raise EagleTrtError(f"--k8s-replicas {self.replicas} and --k8s-max-replicas {self.max_replicas}: need "
                                "1 <= replicas <= max-replicas", "pass e.g. --k8s-replicas 1 --k8s-max-replicas 4")
        if self.openai_port is not None and (self.openai_port in K.TRITON_PORTS.values()
                                             or not 1 <= self.openai_port <= 65535):
            raise EagleTrtError(f"--k8s-openai-port {self.openai_port} is not a free port of the pod",
                                f"pass a port in 1..65535 other than Triton's {sorted(K.TRITON_PORTS.values())}")


def required_paths(spec: BuildSpec, bundle: Path) -> list[RequiredPath]:
    """What the served bundle reads (its engine says: Engine.required_paths)."""
    return get(spec.engine).required_paths(spec, bundle)


def mount_path(spec: BuildSpec, bundle: Path) -> Path:
    """Where the volume mounts: the deepest directory holding the bundle and every outside path it reads (the
    base, the draft), so the pod sees them where the build did; the bundle's parent when they share only /."""
    paths = [bundle, *(r.path for r in required_paths(spec, bundle) if bundle not in r.path.parents)]
    common = Path(os.path.commonpath([str(p) for p in paths]))
    return bundle.parent if common == Path(common.anchor) else common


def write_deploy(spec: BuildSpec, tmp: Path, bundle: Path, options: DeployOptions | None = None) -> list[str]:
    """Write tmp/deploy/ for a bundle whose final path is `bundle`; returns the files written (relative)."""
    options = options or DeployOptions()
    options.validate()
    bundle = Path(bundle).resolve()
    image = serving_image(spec, openai=options.openai_port is not None, override=options.image)
    plan = K.PodPlan(bundle=bundle, mount_path=mount_path(spec, bundle), image=image.image, claim=options.pvc,
                     replicas=options.replicas, max_replicas=options.max_replicas, openai_port=options.openai_port)
    root = tmp / DEPLOY_DIR
    files: dict[str, object] = {}
    base = K.base_objects(spec, plan)
    base_kustomization, overlay_kustomization = K.kustomizations(list(base))
    files |= {f"kubernetes/base/{name}": obj for name, obj in base.items()}
    files["kubernetes/base/kustomization.yaml"] = base_kustomization
    overlay = f"kubernetes/overlays/{spec.engine}"
    files[f"{overlay}/kustomization.yaml"] = overlay_kustomization
    files[f"{overlay}/engine.yaml"] = K.engine_patch(spec, plan)
    files[f"{overlay}/values.yaml"] = K.values_patch(spec, plan)
    for rel, obj in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        docs = obj if isinstance(obj, list) else [obj]
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    shutil.copyfile(Path(__file__).with_name(K.CHECK_SCRIPT), root / "kubernetes" / "base" / K.CHECK_SCRIPT)
    checked = {"engine": spec.engine, "backend_version": spec.backend_version,
               "paths": [{"what": r.what, "path": str(r.path), "hint": r.hint} for r in required_paths(spec, bundle)]}
    (root / REQUIRED_PATHS_FILE).write_text(json.dumps(checked, indent=2) + "\n", encoding="utf-8")
    (root / DASHBOARD_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / DASHBOARD_FILE).write_text(json.dumps(grafana_dashboard(f"eagle-trt: {bundle.name}"), indent=2) + "\n",
                                       encoding="utf-8")
    if image.derived:
        (root / "image").mkdir(exist_ok=True)
        (root / "image" / "Dockerfile").write_text(dockerfile(image), encoding="utf-8")
    (root / "README.md").write_text(_readme(spec, plan, image, overlay), encoding="utf-8")
    return sorted(str(p.relative_to(tmp)) for p in root.rglob("*") if p.is_file())


def _readme(spec: BuildSpec, plan: K.PodPlan, image, overlay: str) -> str:
    outside = [str(r.path) for r in required_paths(spec, plan.bundle) if plan.bundle not in r.path.parents]
    lines = [f"# Deploying {plan.bundle.name} on Kubernetes", "",
             f"Engine `{spec.engine}`, image `{image.image}` ({image.why}).", "",
             f"1. Put `{plan.mount_path}` on a volume, the same tree at the same path: the bundle `{plan.bundle}`"
             + (f" and {', '.join(f'`{p}`' for p in sorted(set(outside)))}" if outside else "") + ".",
             f"   A PersistentVolumeClaim `{plan.claim}` (ReadOnlyMany for more than one replica) must bind it.",
             ]
    if image.derived:
        lines.append(f"2. Build and push the serving image: `docker build -f deploy/image/Dockerfile -t "
                     f"REGISTRY/{image.image} /path/to/eagle-trt`; set its name in `deploy/{overlay}/values.yaml`.")
    else:
        lines.append(f"2. The image is NVIDIA's own (`{image.base}`); the cluster must be able to pull nvcr.io.")
    lines += [f"3. Edit `deploy/{overlay}/values.yaml` (replicas, image, claim, resources, autoscaling bounds).",
              f"4. `kubectl apply -k deploy/{overlay}` (add `-n NAMESPACE`); the init container `check-bundle` "
              "stops the pod with what is missing if the volume does not hold the bundle as built.",
              f"5. Import `deploy/{DASHBOARD_FILE}` into Grafana. The HPA needs prometheus-adapter serving "
              f"`{K.QUEUE_COMPUTE_RATIO}` as a custom metric (eagle-trt's docs/kubernetes.md).", ""]
    unreachable = sorted({p for p in outside if plan.mount_path not in Path(p).parents})
    if unreachable:
        lines += [f"Note: the bundle and {', '.join(unreachable)} share no directory but /, so the volume mounts at "
                  f"`{plan.mount_path}` and the pod will not find the others: rebuild with the base, the draft and "
                  "-o under one directory.", ""]
    return "\n".join(lines)

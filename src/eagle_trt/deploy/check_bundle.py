"""Check, inside the serving pod, that a bundle is mounted where it was built and has what its engine reads.

    python3 check_bundle.py BUNDLE --engine ENGINE [--backend-version X.Y]

The Kubernetes Deployment that `eagle-trt build` writes runs it as an init container (in the serving image, so
it uses only the standard library: the NGC Triton images have python3 but not eagle_trt). A bundle's configs name
absolute paths (the engines under OUT, the base's tokenizer, the draft), so the volume must show them at the paths
they had at build time. Exit status 0 and one "bundle OK" line, or 1 and every problem with what to do.
`eagle_trt.deploy` imports `required_paths` from here, so the build and the pod agree on what must be there.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPEC_FILE = "eagle_trt_spec.json"  # eagle_trt.build_spec.SPEC_FILE; this script cannot import eagle_trt
LLMAPI_MODEL_SOURCE = "/app/all_models/llmapi/tensorrt_llm/1"  # model_repository.layout.LLMAPI_MODEL_DIR


def required_paths(spec: dict, bundle: Path) -> dict[str, Path]:
    """{what: path} the served bundle reads: its model repository, the base (tokenizer, and the weights for the
    engines that read Hugging Face directories), the draft, the engines (trtllm) and the LLM-API model code."""
    engine, repo = spec["engine"], bundle / "model_repository"
    paths = {"eagle_model config": repo / "eagle_model" / ("1/model.json" if engine == "vllm" else "config.pbtxt")}
    paths["base model directory"] = Path(spec.get("served_base") or spec["base"]["path"])
    if engine != "trtllm":  # trtllm reads the base's tokenizer only (preprocessing); so does base.path above
        draft = spec.get("served_draft") or (spec.get("draft") or {}).get("path")
        if draft:
            paths["draft directory"] = Path(draft)
    if engine == "trtllm":
        for name in ("eagle", "base"):
            for rank in range(int(spec.get("tp_size", 1))):
                paths[f"{name} engine rank {rank}"] = bundle / "engines" / name / f"rank{rank}.engine"
    if engine == "llmapi":
        for model in ("eagle_engine", "base_engine"):
            for name in ("model.py", "helpers.py"):
                paths[f"{model} LLM-API {name}"] = repo / model / "1" / name
    return paths


def problems(bundle: Path, engine: str, backend_version: str | None) -> list[str]:
    """Everything wrong with the mounted bundle, each with what to do; [] when it can be served."""
    spec_path = bundle / SPEC_FILE
    try:
        spec = json.loads(spec_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"no {SPEC_FILE} at {spec_path}: the volume does not hold the bundle at the path it was built at "
                f"({bundle}); copy the bundle there, or rebuild it with -o under the volume's mount path"]
    except (OSError, ValueError) as exc:
        return [f"cannot read {spec_path}: {exc}; rebuild the bundle"]
    found = []
    if spec.get("engine") != engine:
        found.append(f"the bundle's engine is {spec.get('engine')!r} but this Deployment serves {engine!r}: apply "
                     f"the overlay deploy/kubernetes/overlays/{spec.get('engine')} of this bundle")
    served = (spec.get("trtllm") or {}).get("backend_version") or spec.get("llmapi_version")
    if backend_version is not None and served != backend_version:
        found.append(f"the bundle targets TensorRT-LLM {served} but the image is for {backend_version}: "
                     "use the image of the bundle's own overlay, or rebuild with --backend-version")
    if found:
        return found
    for what, path in required_paths(spec, bundle).items():
        if not path.exists():
            hint = "mount the volume so that it shows the path the build used"
            if " rank " in what:
                hint = "run OUT/engines/build_engines.sh in the serving image (the build skipped trtllm-build)"
            elif "LLM-API" in what:
                hint = f"copy it from {LLMAPI_MODEL_SOURCE} in the serving image into the bundle"
            found.append(f"missing {what}: {path} ({hint})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--backend-version", default=None)
    args = parser.parse_args(argv)
    found = problems(args.bundle, args.engine, args.backend_version)
    if found:
        print(f"bundle check failed for {args.bundle}:", *(f"  - {p}" for p in found), sep="\n", file=sys.stderr)
        return 1
    print(f"bundle OK: {args.bundle} ({args.engine})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

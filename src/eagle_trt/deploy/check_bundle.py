"""Check, inside the serving pod, that a bundle is mounted where it was built and has what its engine reads.

    python3 check_bundle.py BUNDLE --engine ENGINE [--backend-version X.Y]

The Kubernetes Deployment that `eagle-trt build` writes runs it as an init container (in the serving image, so
it uses only the standard library: the NGC Triton images have python3 but not eagle_trt). A bundle's configs name
absolute paths (the engines under OUT, the base's tokenizer, the draft), so the volume must show them at the paths
they had at build time. Exit status 0 and one "bundle OK" line, or 1 and every problem with what to do.
What must be there is what the bundle's engine said it reads (`Engine.required_paths`), written by the build into
OUT/deploy/required_paths.json, so the build and the pod agree.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SPEC_FILE = "eagle_trt_spec.json"  # eagle_trt.build_spec.SPEC_FILE; this script cannot import eagle_trt
REQUIRED_PATHS_FILE = "required_paths.json"  # OUT/deploy/required_paths.json: what the engine said it reads


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
    served = spec.get("backend_version")
    if backend_version is not None and served != backend_version:
        found.append(f"the bundle targets TensorRT-LLM {served} but the image is for {backend_version}: "
                     "use the image of the bundle's own overlay, or rebuild with --backend-version")
    if found:
        return found
    listed = bundle / "deploy" / REQUIRED_PATHS_FILE
    try:
        paths = json.loads(listed.read_text(encoding="utf-8"))["paths"]
    except (OSError, ValueError, KeyError) as exc:
        return [f"cannot read {listed} ({exc}): the bundle was written by another eagle-trt version; rebuild it"]
    return [f"missing {p['what']}: {p['path']} ({p['hint']})" for p in paths if not Path(p["path"]).exists()]


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

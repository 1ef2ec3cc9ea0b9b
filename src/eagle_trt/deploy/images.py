"""Which container serves a bundle: the engine kind's NVIDIA image (`Engine.image`, from Triton's compatibility
matrix in eagle_trt.engines.images), or an image the user derives from it (OUT/deploy/image/Dockerfile) where the
bundle needs more inside: the engine's own additions (torch and eagle-trt for ours; a TensorRT-LLM release no Triton
container ships) or eagle-trt for the OpenAI route (`eagle-trt serve`)."""

from __future__ import annotations

from dataclasses import replace

from eagle_trt.build_spec import BuildSpec
from eagle_trt.engines import get
from eagle_trt.engines.engine import ServingImage
from eagle_trt.engines.images import EAGLE_TRT_ON_TOP

DERIVED_IMAGE = "eagle-trt-triton"  # the name of the image the user builds from OUT/deploy/image/Dockerfile


def serving_image(spec: BuildSpec, *, openai: bool, override: str | None = None) -> ServingImage:
    """The image for this bundle (`override`: the user's own, from --k8s-image)."""
    engine_image = get(spec.engine).image(spec)
    derived = engine_image.derived or openai
    why, install = engine_image.why, engine_image.install
    if openai and not engine_image.derived:
        why, install = f"{why}; derived image adds eagle-trt (the OpenAI route)", install + (EAGLE_TRT_ON_TOP,)
    tag = engine_image.tag or engine_image.base.rsplit(":", 1)[1]
    image = override or (f"{DERIVED_IMAGE}:{tag}" if derived else engine_image.base)
    return replace(engine_image, image=image, derived=derived and override is None, why=why, install=install)


def dockerfile(image: ServingImage) -> str:
    """OUT/deploy/image/Dockerfile: `base` + what the engine and the bundle need, from a source checkout."""
    lines = ["# The serving image for this bundle: NVIDIA's Triton image + eagle-trt, built from an eagle-trt checkout:",
             f"#   docker build -f deploy/image/Dockerfile -t REGISTRY/{image.image} /path/to/eagle-trt",
             "# then push it where the cluster pulls from and set that name in values.yaml.",
             f"FROM {image.base}",
             "COPY . /opt/eagle-trt",
             *image.install]
    return "\n".join(lines) + "\n"

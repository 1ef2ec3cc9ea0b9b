"""Which Triton container serves a bundle: NVIDIA's NGC images, matched to the bundle's engine kind and, for
`trtllm`, to the TensorRT-LLM release its engines were built with (`--backend-version`).

The table is Triton's release compatibility matrix (triton-inference-server/server
docs/introduction/compatibility.md, "Container Name: trtllm-python-py3" and "vllm-python-py3"; README, "Deploying
on Kubernetes", repeats it with the source). For each TensorRT-LLM MAJOR.MINOR it names the newest Triton release
that ships it: TensorRT engines load only in the TensorRT-LLM (and TensorRT) version that built them, so a trtllm
bundle's engines must be built in that same container.

| engine  | image                                               | what else the image needs                        |
|---------|-----------------------------------------------------|--------------------------------------------------|
| pytorch | nvcr.io/nvidia/tritonserver:<YY.MM>-py3             | torch + eagle-trt (a derived image, Dockerfile)  |
| trtllm  | nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3 | nothing (eagle-trt only for the OpenAI route)  |
| llmapi  | nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3 | 1.2: nothing; 1.3 / 1.4 (no Triton container ships them): that TensorRT-LLM and its LLM-API model files (a derived image, Dockerfile) |
| vllm    | nvcr.io/nvidia/tritonserver:<YY.MM>-vllm-python-py3 | nothing (eagle-trt only for the OpenAI route)    |
"""

from __future__ import annotations

from dataclasses import dataclass

from eagle_trt.backend import parse_backend_version
from eagle_trt.build_spec import BuildSpec
from eagle_trt.errors import EagleTrtError
from eagle_trt.llmapi_release import llmapi_release

NGC_TRITON = "nvcr.io/nvidia/tritonserver"
COMPATIBILITY_SOURCE = ("https://github.com/triton-inference-server/server/blob/main/docs/introduction/"
                        "compatibility.md")
# TensorRT-LLM (MAJOR, MINOR) -> (the newest Triton release whose -trtllm-python-py3 image ships it, its exact
# TensorRT-LLM version), from the compatibility matrix (read at commit 0f963c9a of triton-inference-server/server)
TRTLLM_CONTAINERS: dict[tuple[int, int], tuple[str, str]] = {
    (0, 16): ("24.12", "0.16.0"),
    (0, 17): ("25.02", "0.17.0.post1"),
    (0, 18): ("25.04", "0.18.2"),
    (0, 19): ("25.05", "0.19.0"),
    (0, 20): ("25.07", "0.20.0"),
    (0, 21): ("25.08", "0.21.0"),
    (1, 0): ("25.11", "1.0.3.2510"),
    (1, 1): ("26.02", "1.1.0"),
    (1, 2): ("26.07", "1.2.1"),
}
LLMAPI_RELEASE = TRTLLM_CONTAINERS[max(TRTLLM_CONTAINERS)][0]  # the newest -trtllm-python-py3 (1.3 / 1.4 derive from it)
TRTLLM_WHEELS = "https://pypi.nvidia.com"  # where TensorRT-LLM's wheels are published
VLLM_RELEASE = "26.08"  # the newest -vllm-python-py3 in the matrix (vLLM 0.27.1)
PYTHON_RELEASE = LLMAPI_RELEASE  # the plain -py3 image (python backend) for the pytorch engine
DERIVED_IMAGE = "eagle-trt-triton"  # the name of the image the user builds from OUT/deploy/image/Dockerfile


@dataclass(frozen=True)
class ServingImage:
    """The container a bundle's Triton runs in."""

    image: str  # what the Deployment runs
    base: str  # the NGC image it is, or derives from
    derived: bool  # the user builds `image` from `base` + eagle-trt (OUT/deploy/image/Dockerfile)
    why: str  # one line: why this image

    def to_dict(self) -> dict:
        return {"image": self.image, "base": self.base, "derived": self.derived, "why": self.why}


def ngc_image(spec: BuildSpec) -> tuple[str, str]:
    """(the NGC image for the bundle's engine kind, why)."""
    if spec.engine == "trtllm":
        version = spec.trtllm.backend_version
        release = parse_backend_version(version)
        if release not in TRTLLM_CONTAINERS:
            known = ", ".join(f"{a}.{b}" for a, b in TRTLLM_CONTAINERS)
            raise EagleTrtError(f"--backend-version {version}: no Triton container ships TensorRT-LLM "
                                f"{release[0]}.{release[1]}", f"pass one of the released versions: {known}")
        tag, exact = TRTLLM_CONTAINERS[release]
        return (f"{NGC_TRITON}:{tag}-trtllm-python-py3",
                f"TensorRT-LLM {exact}, the release the engines must be built with (--backend-version {version})")
    if spec.engine == "llmapi":
        release = llmapi_release(spec.llmapi_version)
        if release.line in TRTLLM_CONTAINERS:
            tag, exact = TRTLLM_CONTAINERS[release.line]
            return f"{NGC_TRITON}:{tag}-trtllm-python-py3", f"TensorRT-LLM {exact} with its LLM-API Triton model"
        return (f"{NGC_TRITON}:{LLMAPI_RELEASE}-trtllm-python-py3",
                f"no Triton container ships TensorRT-LLM {release.version}: the derived image installs "
                f"{release.exact} and its LLM-API Triton model (--backend-version {release.version})")
    if spec.engine == "vllm":
        return f"{NGC_TRITON}:{VLLM_RELEASE}-vllm-python-py3", "Triton's vLLM backend"
    return f"{NGC_TRITON}:{PYTHON_RELEASE}-py3", "Triton's python backend, which runs eagle_trt's engine model"


def serving_image(spec: BuildSpec, *, openai: bool, override: str | None = None) -> ServingImage:
    """The image for this bundle. The pytorch engine's python models import torch and eagle_trt, and the OpenAI
    route is `eagle-trt serve`: either needs a derived image (the NGC one + eagle-trt), which the user builds."""
    base, why = ngc_image(spec)
    install = needs_trtllm_install(spec)
    derived = spec.engine == "pytorch" or openai or install
    if spec.engine == "pytorch" or openai:
        needs = "torch and eagle-trt (python models)" if spec.engine == "pytorch" else "eagle-trt (the OpenAI route)"
        why = f"{why}; derived image adds {needs}"
    tag = base.rsplit(":", 1)[1] + (f"-trtllm{llmapi_release(spec.llmapi_version).exact}" if install else "")
    image = override or (f"{DERIVED_IMAGE}:{tag}" if derived else base)
    return ServingImage(image=image, base=base, derived=derived and override is None, why=why)


def needs_trtllm_install(spec: BuildSpec) -> bool:
    """An llmapi bundle for a TensorRT-LLM release no Triton container ships (1.3, 1.4)."""
    return spec.engine == "llmapi" and llmapi_release(spec.llmapi_version).line not in TRTLLM_CONTAINERS


def dockerfile(image: ServingImage, spec: BuildSpec) -> str:
    """OUT/deploy/image/Dockerfile: `base` + eagle-trt from a source checkout (the build context)."""
    lines = ["# The serving image for this bundle: NVIDIA's Triton image + eagle-trt, built from an eagle-trt checkout:",
             f"#   docker build -f deploy/image/Dockerfile -t REGISTRY/{image.image} /path/to/eagle-trt",
             "# then push it where the cluster pulls from and set that name in values.yaml.",
             f"FROM {image.base}",
             "COPY . /opt/eagle-trt",
             ]
    if needs_trtllm_install(spec):  # the release's wheel and the LLM-API model files of its own tag
        exact = llmapi_release(spec.llmapi_version).exact
        lines += [f'RUN python3 -m pip install --no-cache-dir --extra-index-url {TRTLLM_WHEELS} "tensorrt_llm=={exact}"',
                  f"RUN git clone --depth 1 --branch v{exact} https://github.com/NVIDIA/TensorRT-LLM.git /tmp/trtllm && "
                  "rm -rf /app/all_models/llmapi && mkdir -p /app/all_models && "
                  "cp -r /tmp/trtllm/triton_backend/all_models/llmapi /app/all_models/llmapi && rm -rf /tmp/trtllm"]
    if spec.engine == "pytorch":  # torch: the CUDA wheel for device cuda; a CPU build is enough for device cpu
        lines.append('RUN python3 -m pip install --no-cache-dir torch "/opt/eagle-trt[runtime]" aiohttp')
    else:  # keep the image's own torch/transformers/TensorRT-LLM: add eagle-trt and what `serve` needs on top
        lines.append("RUN python3 -m pip install --no-cache-dir --no-deps /opt/eagle-trt && "
                     "python3 -m pip install --no-cache-dir click rich safetensors pyyaml aiohttp")
    return "\n".join(lines) + "\n"

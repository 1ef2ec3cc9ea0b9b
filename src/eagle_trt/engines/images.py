"""NVIDIA's Triton images, as Triton's release compatibility matrix lists them (triton-inference-server/server
docs/introduction/compatibility.md, "Container Name: trtllm-python-py3" and "vllm-python-py3", read at commit
0f963c9a): each engine kind picks its image from here (`Engine.image`). For each TensorRT-LLM MAJOR.MINOR the table
names the newest Triton release that ships it: TensorRT engines load only in the TensorRT-LLM (and TensorRT) version
that built them, so a trtllm bundle's engines must be built in that same container.

| engine  | image                                                 | what else the image needs                        |
|---------|-------------------------------------------------------|--------------------------------------------------|
| pytorch | nvcr.io/nvidia/tritonserver:<YY.MM>-py3               | torch + eagle-trt (a derived image, Dockerfile)  |
| trtllm  | nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3 | eagle-trt (its pre/postprocessing and acceptance steps import it) |
| llmapi  | nvcr.io/nvidia/tritonserver:<YY.MM>-trtllm-python-py3 | eagle-trt (the acceptance steps); 1.3 / 1.4 (no Triton container ships them): also that TensorRT-LLM and its LLM-API model files |
| vllm    | nvcr.io/nvidia/tritonserver:<YY.MM>-vllm-python-py3   | nothing (eagle-trt only for the OpenAI route)    |
"""

from __future__ import annotations

NGC_TRITON = "nvcr.io/nvidia/tritonserver"
COMPATIBILITY_SOURCE = ("https://github.com/triton-inference-server/server/blob/main/docs/introduction/"
                        "compatibility.md")
# TensorRT-LLM (MAJOR, MINOR) -> (the newest Triton release whose -trtllm-python-py3 image ships it, its exact
# TensorRT-LLM version)
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
NEWEST_TRITON = TRTLLM_CONTAINERS[max(TRTLLM_CONTAINERS)][0]  # the newest Triton release the table knows
TRTLLM_WHEELS = "https://pypi.nvidia.com"  # where TensorRT-LLM's wheels are published
VLLM_RELEASE = "26.08"  # the newest -vllm-python-py3 in the matrix (vLLM 0.27.1)


def triton_image(tag: str, flavour: str = "") -> str:
    """nvcr.io/nvidia/tritonserver:<tag>-<flavour>py3 (flavour "trtllm-python-", "vllm-python-" or "")."""
    return f"{NGC_TRITON}:{tag}-{flavour}py3"
# what a derived image adds on an engine image that keeps its own torch, transformers and TensorRT-LLM: eagle-trt
# without its dependencies (our python models import it), and what the OpenAI route (`eagle-trt serve`) needs on top
EAGLE_TRT_ON_TOP = ("RUN python3 -m pip install --no-cache-dir --no-deps /opt/eagle-trt && "
                    "python3 -m pip install --no-cache-dir click rich safetensors pyyaml aiohttp")

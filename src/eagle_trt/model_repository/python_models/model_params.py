"""What the python models share, copied beside each one's model.py (the python stub puts that directory on
sys.path): their config.pbtxt parameters and the directories those parameters name."""

import json
import os

import triton_python_backend_utils as pb_utils


def parameters(args: dict) -> dict:
    """The string parameters of this model's config.pbtxt, from TritonPythonModel.initialize's args."""
    config = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in config.get("parameters", {}).items()}


def local_dir(param: dict, key: str) -> str:
    """A directory named by a config parameter; a clear load error when it is gone."""
    path = param.get(key, "")
    if not os.path.isdir(path):
        raise pb_utils.TritonModelException(
            f"{key} {path!r} (a parameter in this model's config.pbtxt) is not a directory; the bundle was built "
            "from a model directory that has moved: rebuild it with `eagle-trt build`")
    return path

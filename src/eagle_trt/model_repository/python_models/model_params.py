"""What the python models share, copied beside each one's model.py (the python stub puts that directory on
sys.path): PYTHONPATH honoured, their config.pbtxt parameters and the directories those parameters name."""

import json
import os
import sys

import triton_python_backend_utils as pb_utils


def honor_pythonpath() -> None:
    """Triton's python backend stub runs Python isolated (sys.flags.isolated: PYTHONPATH ignored), so a server
    started with PYTHONPATH (a source checkout, the tests) would import the venv's installed eagle_trt instead;
    put PYTHONPATH's entries first, as a plain `python` does. Done on import, before any model imports eagle_trt."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    sys.path[:0] = [e for e in entries if e not in sys.path]


honor_pythonpath()


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

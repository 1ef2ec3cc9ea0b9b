"""What the python models share, copied beside each one's model.py (the python stub puts that directory on
sys.path): PYTHONPATH honoured, their config.pbtxt parameters, and the bundle's spec they take their values from."""

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


def bundle_spec(param: dict):
    """The bundle's BuildSpec (its eagle_trt_spec.json, named by the `bundle_spec` parameter): what every value
    this model runs with comes from; a clear load error when the bundle is not where it was built."""
    from eagle_trt.build_spec import BuildSpec

    path = param.get("bundle_spec", "")
    if not os.path.isfile(path):
        raise pb_utils.TritonModelException(
            f"bundle_spec {path!r} (a parameter in this model's config.pbtxt) is not a file; the bundle has moved "
            "from where `eagle-trt build` wrote it: rebuild it, or mount it at that path")
    return BuildSpec.load(path)


def checked_dir(path, what: str) -> str:
    """A directory the bundle's spec names; a clear load error when it is gone."""
    if not os.path.isdir(str(path)):
        raise pb_utils.TritonModelException(
            f"the {what} {str(path)!r} (from the bundle's eagle_trt_spec.json) is not a directory; the bundle was "
            "built from a model directory that has moved: rebuild it with `eagle-trt build`")
    return str(path)

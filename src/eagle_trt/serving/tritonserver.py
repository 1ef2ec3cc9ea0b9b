"""Run a real `tritonserver` on a model repository: find it, start it, wait for readiness, stop it cleanly.

The server is the one on PATH (NGC container, backends in /opt/tritonserver/backends) or the one shipped in the
`nvidia-pytriton` wheel. For the wheel we assemble a python backend directory in a cache dir (the backend library,
`triton_python_backend_utils.py` and the stub built for the running Python, as pytriton itself does) and put the
running interpreter's bin dir first on PATH: the stub's embedded Python finds `python3` there and so uses this
virtualenv's site-packages, which is how the python models import `eagle_trt`, torch and transformers.

    with TritonServer(repo, models=["eagle_model"]) as server:   # free loopback ports, explicit model control
        print(server.http_url)
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.spec import MODELS

log = logging.getLogger(__name__)

DEFAULT_MODELS = MODELS
NOISE = ("NVML", "DCGM", "CudaDriverHelper", "pinned memory")  # harmless log lines on a machine without a GPU
EXIT_TIMEOUT_S = 10  # on stop, Triton waits this long for requests in flight
CACHE_DIR = Path(os.environ.get("EAGLE_TRT_CACHE", Path.home() / ".cache" / "eagle-trt"))


def find_tritonserver() -> tuple[Path, Path | None, dict[str, str]]:
    """(server binary, backend directory or None for the server's default, extra environment)."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return Path(on_path), None, {}
    try:
        import pytriton
    except ImportError:
        raise EagleTrtError(
            "no tritonserver found: not on PATH and the nvidia-pytriton package is not installed",
            "run inside the Triton (NGC) container, or pip install 'eagle-trt[serving]' (ships a tritonserver)",
        ) from None
    root = Path(pytriton.__file__).parent / "tritonserver"
    binary = root / "bin" / "tritonserver"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not binary.is_file() or not stub.is_file():
        raise EagleTrtError(f"the nvidia-pytriton install at {root.parent} has no tritonserver or no python "
                            f"backend stub for Python {version}",
                            "reinstall nvidia-pytriton, or use a Python version it ships a stub for")
    libs = root.parent.parent / "nvidia_pytriton.libs"
    backends = _assemble_backends(root, stub, version)
    ld_path = ":".join(p for p in (_libpython_dir(), str(libs), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return binary, backends, {"LD_LIBRARY_PATH": ld_path}


def _libpython_dir() -> str:
    """The running Python's libpython dir: the stub must load the libpython of the interpreter whose stdlib and
    extension modules it uses (a system libpython3.x of another patch level fails on e.g. `import ssl`)."""
    import sysconfig

    libdir, name = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and name and (Path(libdir) / name).exists():
        return libdir
    return ""


def _assemble_backends(root: Path, stub: Path, version: str) -> Path:
    """A backend dir `<cache>/python/` = pytriton's python backend + the stub for this Python (built once)."""
    import pytriton

    key = f"pytriton-{getattr(pytriton, '__version__', 'x')}-{stub.stat().st_size}-py{version}"
    target = CACHE_DIR / "triton-backends" / key
    if (target / "python" / "triton_python_backend_stub").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=key + ".", dir=target.parent))
    (tmp / "python").mkdir()
    for item in (root / "backends" / "python").iterdir():
        if item.is_file():
            shutil.copy2(item, tmp / "python" / item.name)
    shutil.copy2(stub, tmp / "python" / "triton_python_backend_stub")
    try:
        tmp.rename(target)
    except OSError:  # another process assembled it first
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port(host: str, port: int, what: str) -> None:
    """Refuse a port that tritonserver could not bind. Its listeners (libevent's for HTTP, gRPC's, civetweb's for
    metrics) all set SO_REUSEADDR, so we bind the same way: a port whose last connections linger in TIME_WAIT (a
    server that just crashed or stopped with keep-alive clients connected) is free to them and to us; a port where
    something still listens is refused on Linux even with SO_REUSEADDR."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise EagleTrtError(f"{what} port {port} on {host} is already in use",
                                f"stop whatever listens there (`ss -ltnp 'sport = :{port}'` names it), or pass "
                                f"another --{what}-port") from None


class TritonServer:
    """A tritonserver process on loopback with explicit model control; a context manager."""

    def __init__(self, model_repository: str | Path, *, models=DEFAULT_MODELS, host: str = "127.0.0.1",
                 http_port: int | None = None, grpc_port: int | None = None, metrics_port: int | None = None,
                 log_file: str | Path | None = None, env: dict[str, str] | None = None, log_verbose: int = 0):
        self.repo = Path(model_repository).resolve()
        if not self.repo.is_dir():
            raise EagleTrtError(f"no model repository at {self.repo}",
                                "pass a bundle built by `eagle-trt build` (its model_repository/ directory)")
        missing = [m for m in models if not (self.repo / m / "config.pbtxt").is_file()]
        if missing:
            available = sorted(p.name for p in self.repo.iterdir() if (p / "config.pbtxt").is_file())
            raise EagleTrtError(f"model(s) {missing} not in {self.repo}", f"choose among {available}")
        self.models = list(models)
        self.host = host
        self.ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
        self.log_file = Path(log_file) if log_file else None
        self.extra_env = dict(env or {})
        self.log_verbose = log_verbose
        self.process: subprocess.Popen | None = None
        self.starts = 0  # how many times start() launched the process (restarts append to the same log)
        self._log_handle = None

    # ---- endpoints --------------------------------------------------------------------------------------------
    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.ports['http']}"

    @property
    def grpc_url(self) -> str:
        return f"{self.host}:{self.ports['grpc']}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.ports['metrics']}/metrics"

    # ---- lifecycle --------------------------------------------------------------------------------------------
    def command(self, binary: Path, backends: Path | None) -> list[str]:
        cmd = [str(binary), "--model-repository", str(self.repo), "--model-control-mode", "explicit",
               "--http-address", self.host, "--http-port", str(self.ports["http"]),
               "--grpc-address", self.host, "--grpc-port", str(self.ports["grpc"]),
               "--metrics-address", self.host, "--metrics-port", str(self.ports["metrics"]),
               "--log-verbose", str(self.log_verbose), "--exit-on-error", "true",
               "--exit-timeout-secs", str(EXIT_TIMEOUT_S)]
        if backends is not None:
            cmd += ["--backend-directory", str(backends)]
        for model in self.models:
            cmd += ["--load-model", model]
        return cmd

    def backends_needed(self) -> set[str]:
        """Backends of the models to load and of every model their ensembles compose."""
        from eagle_trt.model_repository.configs import parse

        needed, todo, seen = set(), list(self.models), set()
        while todo:
            name = todo.pop()
            if name in seen or not (self.repo / name / "config.pbtxt").is_file():
                continue
            seen.add(name)
            config = parse((self.repo / name / "config.pbtxt").read_text(encoding="utf-8"))
            if config.backend:
                needed.add(config.backend)
            todo.extend(step.model_name for step in config.ensemble_scheduling.step)
        return needed

    def start(self, timeout: float = 600.0) -> TritonServer:
        binary, backends, env_extra = find_tritonserver()
        if backends is not None:
            missing = sorted(b for b in self.backends_needed() if not (backends / b).is_dir())
            if missing:
                raise EagleTrtError(
                    f"the models need the Triton backend(s) {missing}, which the tritonserver of nvidia-pytriton "
                    f"({binary}) does not have (it has only the python backend)",
                    "serve this bundle inside the matching Triton container (e.g. nvcr.io/nvidia/tritonserver:"
                    "<yy.mm>-trtllm-python-py3 or -vllm-python-py3), or build it with --engine pytorch")
        for what, port in self.ports.items():
            if port is None:
                self.ports[what] = free_port(self.host)
            else:
                check_port(self.host, port, what)
        env = dict(os.environ)
        env.update(env_extra)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env.update(self.extra_env)
        if self.log_file is None:
            fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
            self.log_file = Path(name)
        self._log_handle = open(self.log_file, "ab" if self.starts else "wb")
        self.starts += 1
        cmd = self.command(binary, backends)
        log.info("starting %s", " ".join(cmd))
        self.process = subprocess.Popen(cmd, stdout=self._log_handle, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float) -> None:
        """Until the server and its models are ready and its metrics port answers: Triton starts its metrics service
        after the HTTP one (42 ms later in a CI run, whose first scrape right after readiness was refused)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise self._failure(f"tritonserver exited with code {self.process.returncode} while starting")
            if self._http_ok("/v2/health/ready") and all(self._http_ok(f"/v2/models/{m}/ready") for m in self.models) \
                    and self._url_ok(self.metrics_url):
                return
            time.sleep(0.25)
        raise self._failure(f"tritonserver was not ready after {timeout:.0f} s")

    def model_states(self) -> dict[str, str]:
        """Model name -> state (READY, UNAVAILABLE, ...) from the repository index; unloaded models are absent."""
        request = urllib.request.Request(self.http_url + "/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            index = json.loads(response.read())
        return {entry["name"]: entry.get("state", "") for entry in index}

    def load(self, model: str, timeout: float = 600.0) -> None:
        """Load one more model (explicit model control); raises with Triton's reason when it fails."""
        request = urllib.request.Request(f"{self.http_url}/v2/repository/models/{model}/load", data=b"{}",
                                         method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise EagleTrtError(f"tritonserver could not load {model!r}: {detail}",
                                f"the full server log is {self.log_file}") from None
        if model not in self.models:
            self.models.append(model)

    def _http_ok(self, path: str) -> bool:
        return self._url_ok(self.http_url + path)

    @staticmethod
    def _url_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _failure(self, what: str) -> EagleTrtError:
        reasons = self.failure_reasons()
        message = what + (":\n  " + "\n  ".join(reasons) if reasons else "")
        return EagleTrtError(message, f"the full server log is {self.log_file}")

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace") if self.log_file else ""
        except OSError:
            return ""

    def failure_reasons(self) -> list[str]:
        """Triton's own words for why it failed: load errors, port conflicts, python model tracebacks."""
        reasons = []
        for line in self.log_text().splitlines():
            text = re.sub(r"^[EWI]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ", "", line).strip().strip('"')
            lowered = text.lower()
            if (line.startswith("E") and re.match(r"^E\d{4}", line)) or lowered.startswith("error:") or \
                    "failed to load" in lowered or "address already in use" in lowered or \
                    lowered.startswith(("traceback", "exception", "eagletrterror")) or "error:" in lowered[:40]:
                text = text.split("\\n")[0][:400]  # Triton escapes python tracebacks onto one line
                if text and text not in reasons and not any(n in text for n in NOISE):
                    reasons.append(text)
        core = [r.split(": ", 1)[-1] for r in reasons]
        kept = [r for i, r in enumerate(reasons) if not any(core[i] in later for later in reasons[i + 1:])]
        return kept[-12:]  # a reason repeated inside a later line (Triton nests them) is shown once

    def stop(self, timeout: float = EXIT_TIMEOUT_S + 15.0) -> int | None:
        """SIGINT (Triton unloads models and exits), then SIGKILL of the whole session after `timeout`."""
        code = None
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                code = self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("tritonserver did not stop within %.0f s; killing it", timeout)
                _killpg(self.process.pid)
                code = self.process.wait(10)
        elif self.process is not None:
            code = self.process.returncode
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return code

    def kill(self) -> int | None:
        """SIGKILL the server and its python backend stubs (one process group): requests in flight end with a
        closed connection at once. Returns the exit code (None if there was no process)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            _killpg(self.process.pid)
            self.process.wait(10)
        else:  # dead already (crash): its stubs may linger, still holding their shared memory
            _killpg(self.process.pid)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        return self.process.returncode

    def unload(self, model: str) -> None:
        """Unload one model (explicit model control); Triton answers at once and unloads in the background."""
        request = urllib.request.Request(f"{self.http_url}/v2/repository/models/{model}/unload", data=b"{}",
                                         method="POST")
        with urllib.request.urlopen(request, timeout=30):
            pass

    def __enter__(self) -> TritonServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:  # nothing left in the group
        pass

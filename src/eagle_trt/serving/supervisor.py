"""Keep a served bundle up: restart tritonserver when it dies, recover an engine model whose stub process died.

Two faults take a bundle down without Triton noticing (issue 18):
- tritonserver itself dies (e.g. SIGSEGV in its JSON parser on a deeply nested body): the supervisor starts it
  again on the same ports, after a backoff that doubles with each fast failure, and gives up with EagleTrtError
  after `max_fast_failures` deaths that each came less than FAST_FAILURE_S after the server was ready.
- the python backend stub of an engine model dies (OOM killer, kill -9, a crash in torch): Triton 2.51 keeps
  answering 200 to /v2/models/eagle_model/ready, requests in flight wait forever for responses that will not come,
  and new ones fail with "Stub process ... is not healthy". Triton's readiness never reflects it, so the supervisor
  watches the stub processes themselves (children of tritonserver whose command line names `<model>/1/model.py`).
  When one is gone it unloads the ensemble first (its readiness turns false at once), then the engine, and loads the
  ensemble again (the repository API). An engine with requests stuck in flight never finishes unloading (Triton
  waits for them), so after RELOAD_GRACE_S the supervisor restarts tritonserver instead: the stuck clients get a
  closed connection, an error, instead of a hang.

No front proxy is needed for readiness: Triton's per-model readiness is false from the moment the ensemble is
unloaded until it is loaded again, and the server's own readiness is unreachable while it restarts.

    supervisor = Supervisor(server)   # server: a started TritonServer
    supervisor.run()                  # until KeyboardInterrupt; EagleTrtError when it gives up
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from eagle_trt.errors import EagleTrtError
from eagle_trt.model_repository.layout import ENSEMBLES
from eagle_trt.serving.tritonserver import TritonServer

log = logging.getLogger(__name__)

POLL_S = 0.5  # how often the server process and the engine stubs are checked
FAST_FAILURE_S = 60.0  # a server that dies within this long after being ready counts as a fast failure
MAX_FAST_FAILURES = 5  # consecutive fast failures before the supervisor gives up
BACKOFF_S = (1.0, 30.0)  # first delay before a restart, and its ceiling (doubles per consecutive fast failure)
RELOAD_GRACE_S = 10.0  # how long a dead engine may take to unload before the server is restarted instead
READY_TIMEOUT_S = 900.0  # readiness wait of a restart or a reload


class Supervisor:
    """Watches one started TritonServer; `events` receives one human line per action (default: the log)."""

    def __init__(self, server: TritonServer, *, max_fast_failures: int = MAX_FAST_FAILURES,
                 events: Callable[[str], None] | None = None, ready_timeout: float = READY_TIMEOUT_S):
        if server.process is None:
            raise EagleTrtError("the supervisor needs a started server", "call server.start() first")
        self.server = server
        self.max_fast_failures = max_fast_failures
        self.events = events or log.warning
        self.ready_timeout = ready_timeout
        self.fast_failures = 0
        self.restarts = 0
        self.reloads = 0
        self.ready_at = time.monotonic()
        self.stubs = self.engine_stubs()

    # ---- the loop ---------------------------------------------------------------------------------------------
    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        while not should_stop():
            self.check()
            time.sleep(POLL_S)

    def check(self) -> None:
        """One round: restart a dead server, recover dead engines."""
        code = self.server.process.poll()
        if code is not None:
            self.restart(f"tritonserver exited with code {code}{_signal_name(code)}")
            return
        dead = {model: pid for model, pid in self.stubs if not _alive(pid)}
        running = {model for model, _ in self.engine_stubs()}
        # an engine that died between readiness and our first look at it has no stub at all
        dead.update({model: 0 for model in self.engines() if model not in running and model not in dead})
        for model, pid in dead.items():
            restarts = self.restarts
            self.recover(model, pid)
            if self.restarts != restarts:  # a fresh server: its engines are all new
                return

    # ---- the server -------------------------------------------------------------------------------------------
    def restart(self, why: str) -> None:
        uptime = time.monotonic() - self.ready_at
        self.fast_failures = self.fast_failures + 1 if uptime < FAST_FAILURE_S else 1
        if self.fast_failures > self.max_fast_failures:
            raise EagleTrtError(f"{why}; it died {self.fast_failures - 1} times in a row less than "
                                f"{FAST_FAILURE_S:.0f} s after starting, giving up",
                                f"read the server log {self.server.log_file}")
        delay = min(BACKOFF_S[0] * 2 ** (self.fast_failures - 1), BACKOFF_S[1])
        self.events(f"{why} after {uptime:.1f} s up; restarting it in {delay:.0f} s "
                    f"(fast failure {self.fast_failures}/{self.max_fast_failures}; log {self.server.log_file})")
        self.server.kill()
        time.sleep(delay)
        started = time.monotonic()
        self.server.start(timeout=self.ready_timeout)
        self.restarts += 1
        self.ready_at = time.monotonic()
        self.stubs = self.engine_stubs()
        self.events(f"tritonserver restarted and ready in {self.ready_at - started:.1f} s "
                    f"(models {', '.join(self.server.models)})")

    # ---- the engines ------------------------------------------------------------------------------------------
    def recover(self, engine: str, pid: int) -> None:
        """Unload the ensembles over a dead engine and the engine, then load them again; restart the server when
        the engine cannot unload (requests stuck on it) or the load fails."""
        ensembles = [e for e, m in ENSEMBLES.items() if m == engine and e in self.server.models]
        started = time.monotonic()
        self.events(f"{engine}'s stub process (pid {pid or '?'}) died; unloading {', '.join(ensembles + [engine])} "
                    "and loading it again")
        try:
            for model in ensembles + [engine]:
                self.server.unload(model)
            deadline = time.monotonic() + RELOAD_GRACE_S
            while (stuck := self.server.model_states().get(engine) in ("READY", "UNLOADING")) and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
            if not stuck:
                for model in ensembles or [engine]:
                    self.server.load(model, timeout=self.ready_timeout)
        except (OSError, EagleTrtError) as exc:  # URLError is an OSError
            self.restart(f"reloading {engine} failed ({exc})")
            return
        if stuck:
            self.restart(f"{engine} did not unload within {RELOAD_GRACE_S:.0f} s (requests stuck in flight on its "
                         "dead stub)")
            return
        self.reloads += 1
        self.stubs = self.engine_stubs()
        self.events(f"{engine} reloaded in {time.monotonic() - started:.1f} s")

    def engines(self) -> set[str]:
        """The engine models that should be running: those of the loaded ensembles, and engines loaded directly."""
        return {ENSEMBLES.get(m, m) for m in self.server.models if m in ENSEMBLES or m in ENSEMBLES.values()}

    def engine_stubs(self) -> list[tuple[str, int]]:
        """(engine model, pid) of every instance's stub process of the engines loaded now."""
        found: list[tuple[str, int]] = []
        for pid, argv in children(self.server.process.pid):
            if len(argv) < 2 or "stub" not in Path(argv[0]).name:
                continue
            model = Path(argv[1]).parent.parent.name  # <repo>/<model>/<version>/model.py
            if model in ENSEMBLES.values() and any(a.startswith(f"{model}_") for a in argv[2:]):
                found.append((model, pid))  # instance stubs are named <model>_<group>_<index>
        return found


def children(parent: int) -> list[tuple[int, list[str]]]:
    """(pid, argv) of the live processes whose parent is `parent` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, ...
            if int(fields[1]) != parent or fields[0] == "Z":
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry.name), [a.decode(errors="replace") for a in argv if a]))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _signal_name(code: int) -> str:
    import signal

    if code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""

"""llama.cpp as the CPU baseline: what a user who wants speed on a CPU would run instead of our engine.

`LlamaCpp` runs a GGUF through llama-cpp-python (an optional extra, built from source with this machine's CPU
flags: `make llamacpp`), greedy, on the token ids our benchmark feeds its own engine, with the same number of
threads and the same stop tokens, so `eagle-trt bench --llamacpp GGUF` compares tok/s on identical work in one run.
Each request starts from an empty KV cache, unless `reuse_prefix`: then a prompt that continues the last request
(a next turn) evaluates only what is new, by our engine's rule (runtime.prefix), for `bench --reuse-prefix`.

llama.cpp runs in a child process: in one process with torch, ggml's AMX int8 kernels and oneDNN's (both use the
CPU's tile registers, from two OpenMP runtimes) end in SIGILL on this machine's CPU. The child times each request
itself, so the pipe between the two is not counted.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from eagle_trt.errors import EagleTrtError

LLAMACPP_HINT = ("build it once with `make llamacpp` (llama-cpp-python from source with this CPU's flags, about 2 min "
                 "on 2 cores), or `CMAKE_ARGS=\"-DGGML_NATIVE=ON\" pip install llama-cpp-python`")


@dataclass(frozen=True)
class LlamaCppRun:
    token_ids: list[int]
    seconds: float  # the whole request: prompt evaluation and every token
    prefill_s: float  # until the first generated token
    cached_prompt_tokens: int = 0  # leading prompt tokens whose K/V the last request left (reuse_prefix)


def check_llamacpp(gguf: str | Path) -> Path:
    """Before any work: `gguf` is a GGUF file and llama-cpp-python is installed; else a clear error."""
    gguf = Path(gguf)
    if gguf.suffix != ".gguf" or not gguf.is_file():
        raise EagleTrtError(f"--llamacpp {gguf}: not a .gguf file", "pass the GGUF file the base comes from "
                            "(`eagle-trt demo-model --gguf` prints the demo base's)")
    if importlib.util.find_spec("llama_cpp") is None:
        raise EagleTrtError("--llamacpp needs llama-cpp-python, which is not installed", LLAMACPP_HINT)
    return gguf


class LlamaCpp:
    """One GGUF loaded in llama.cpp in a child process; `generate` is greedy decoding of a token-id prompt."""

    def __init__(self, gguf: str | Path, threads: int, n_ctx: int = 4096, reuse_prefix: bool = False):
        import multiprocessing

        gguf = check_llamacpp(gguf)
        self.threads, self.reuse_prefix = threads, reuse_prefix
        self._held = None  # runtime.prefix.HeldTokens: what the child's KV cache holds (reuse_prefix)
        self._pipe, child = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(child, str(gguf), threads, n_ctx), daemon=True)
        self._process.start()
        child.close()  # the child holds its own end now: if it dies, this end reads EOF instead of waiting 600 s
        ready = self._receive()
        self.version, self.system_info = ready["version"], ready["system_info"]

    def generate(self, prompt: Sequence[int], max_tokens: int, stop_token_ids: Sequence[int] = ()) -> LlamaCppRun:
        """Greedy (temperature 0, no repeat penalty): up to max_tokens, ending after a stop token (kept, as our
        engine keeps it)."""
        from eagle_trt.runtime.prefix import HeldTokens, reusable_prefix

        prompt = [int(t) for t in prompt]
        reuse = reusable_prefix(self._held, prompt) if self.reuse_prefix else 0
        self._pipe.send((prompt, max_tokens, list(stop_token_ids), reuse))
        run = LlamaCppRun(**self._receive())
        self._held = HeldTokens(len(prompt), tuple(prompt + run.token_ids[:-1]))  # the last token was not evaluated
        return run

    def close(self) -> None:
        if self._process.is_alive():
            self._pipe.send(None)
            self._process.join(timeout=10)

    def _receive(self) -> dict:
        if not self._pipe.poll(600):
            raise EagleTrtError("llama.cpp did not answer within 600 s", "check the GGUF and the machine's load")
        try:
            message = self._pipe.recv()
        except EOFError:
            self._process.join(timeout=10)
            raise EagleTrtError(f"the llama.cpp process died (exit code {self._process.exitcode})",
                                "run it alone to see its error: python -c 'import llama_cpp'; a script that "
                                "starts it needs an `if __name__ == \"__main__\":` guard (the child is spawned)"
                                ) from None
        if "error" in message:
            raise EagleTrtError(f"llama.cpp: {message['error']}", LLAMACPP_HINT)
        return message


def _serve(pipe, gguf: str, threads: int, n_ctx: int) -> None:
    """The child: load the GGUF, answer (prompt, max_tokens, stops) requests until None."""
    try:
        import llama_cpp

        model = llama_cpp.Llama(gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
    except Exception as exc:  # reported to the parent as a clear error, not a dead pipe
        pipe.send({"error": f"{type(exc).__name__}: {exc}"})
        return
    pipe.send({"version": llama_cpp.__version__,
               "system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip()})
    while (request := pipe.recv()) is not None:
        prompt, max_tokens, stop_token_ids, reuse = request
        stops = set(stop_token_ids)
        if reuse and model.n_tokens >= reuse and model.input_ids[:reuse].tolist() == prompt[:reuse]:
            model.n_tokens = reuse  # the cache's first `reuse` tokens stay; evaluation goes on from there
        else:
            reuse = 0
            model.reset()  # no prefix reuse from the previous request
        tokens: list[int] = []
        t0 = time.perf_counter()
        first = None
        for token in model.generate(prompt[reuse:], temp=0.0, top_k=1, repeat_penalty=1.0, reset=False):
            if first is None:
                first = time.perf_counter()
            tokens.append(int(token))
            if len(tokens) >= max_tokens or token in stops:
                break
        end = time.perf_counter()
        pipe.send({"token_ids": tokens, "seconds": end - t0, "prefill_s": (first or end) - t0,
                   "cached_prompt_tokens": reuse})

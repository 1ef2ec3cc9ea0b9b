"""Triton python model `eagle_engine` / `base_engine`: eagle_trt.runtime.EagleEngine behind the tensorrt_llm
model's tensor contract (decoupled, streaming, CPU or GPU).

Inputs: input_ids, input_lengths, request_output_len, end_id, pad_id, streaming, temperature, runtime_top_k,
runtime_top_p, seed, stop_words_list ([2, L], TensorRT-LLM layout), return_perf_metrics, exclude_input_in_output,
and our stream_key. Outputs per response: output_ids [1, 1, n] (the tokens committed since the last response when
streaming, all of them otherwise), sequence_length [1, 1], acceptance_rate, total_accepted_draft_tokens,
total_draft_tokens (cumulative for the request, always filled), stream_key (passed through) and finished.
A streaming request ends with an empty response whose `finished` is true and which carries the final figures.

The same file serves both engines: `draft_dir` empty -> plain decoding through the same runtime code path.
Requests run one at a time on a worker thread (execute() only queues them), so a slow generation never blocks
Triton; a cancelled request stops at the next verify step. Cancelled means either Triton cancelled this request
(a gRPC cancel sent to this model directly) or a *cancel request* named its stream_key: input_lengths 0 and
request_output_len 0 with a stream_key. Postprocessing sends one when it sees that the eagle_model/base_model
request it serves was cancelled (HTTP client gone, gRPC cancel): Triton's ensemble cancels only the steps it
schedules after the cancellation, never the engine step already running (core ensemble_scheduler.cc,
ScheduleSteps), so the engine would otherwise generate for nobody until max_tokens.
Copied as model_repository/{eagle_engine,base_engine}/1/model.py.
"""

import json
import os
import queue
import sys
import threading
from collections import OrderedDict

import numpy as np
import triton_python_backend_utils as pb_utils


def _honor_pythonpath():
    """Triton's python backend stub runs Python isolated (sys.flags.isolated: PYTHONPATH ignored), so a server
    started with PYTHONPATH (a source checkout, the tests) would import the venv's installed eagle_trt instead;
    put PYTHONPATH's entries first, as a plain `python` does."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    sys.path[:0] = [e for e in entries if e not in sys.path]


_honor_pythonpath()


MAX_CANCELLED_KEYS = 4096  # remembered cancelled stream keys (oldest dropped first)


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


def unpack_stop_words(packed) -> list:
    """[2, L] (flat ids / end offsets, -1 padded) -> [[ids], ...]."""
    packed = np.asarray(packed).reshape(2, -1)
    flat, offsets, start, out = packed[0], packed[1], 0, []
    for end in offsets:
        if end < 0:
            break
        out.append([int(t) for t in flat[start:end]])
        start = int(end)
    return [seq for seq in out if seq]


def find_stop(tokens: list, stop_sequences: list, start: int):
    """Index just before the first stop sequence ending at or after `start` in `tokens`, else None."""
    for end in range(max(start, 1), len(tokens) + 1):
        for seq in stop_sequences:
            if len(seq) <= end and tokens[end - len(seq):end] == seq:
                return end - len(seq)
    return None


def cpu_threads(requested: int, engines_sharing: int) -> int:
    """Intra-op threads for this instance: `requested`, or (0) an even share of the cores this process may use.
    More threads than cores across the engines make OpenMP's spinning workers wait on each other's descheduled
    threads: measured in scripts/contention.py, 2 engines x 2 threads on 2 cores ran up to 10x slower."""
    if requested > 0:
        return requested
    return max(1, len(os.sched_getaffinity(0)) // max(1, engines_sharing))


def _is_cancel_request(request) -> bool:
    """input_lengths 0, request_output_len 0 and a stream_key: "stop the stream with this key"."""
    return (pb_utils.get_input_tensor_by_name(request, "stream_key") is not None
            and int(_scalar(request, "input_lengths", 1)) == 0 and int(_scalar(request, "request_output_len", 1)) == 0)


def cancel_request(engine: str, stream_key: int):
    """The BLS request that asks `engine` to stop the stream `stream_key` (used by postprocessing)."""
    def tensor(name, value, dtype):
        return pb_utils.Tensor(name, np.array([[value]], dtype=dtype))  # [1, 1]

    return pb_utils.InferenceRequest(
        model_name=engine, requested_output_names=["finished"],
        inputs=[tensor("input_ids", 0, np.int32), tensor("input_lengths", 0, np.int32),
                tensor("request_output_len", 0, np.int32), tensor("stream_key", stream_key, np.uint64)])


class TritonPythonModel:
    def initialize(self, args):
        from eagle_trt.runtime import EagleEngine

        config = json.loads(args["model_config"])
        param = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        for key in ("base_dir", "draft_dir"):
            if param.get(key) and not os.path.isdir(param[key]):
                raise pb_utils.TritonModelException(
                    f"{key} {param[key]!r} (a parameter in this model's config.pbtxt) is not a directory; the bundle "
                    "was built from a model directory that has moved: rebuild it with `eagle-trt build`")
        if param.get("device", "cpu") == "cpu":
            self.threads = cpu_threads(int(param.get("threads", 0)), int(param.get("engines_sharing", 1)))
            import torch

            torch.set_num_threads(self.threads)
        self.engine = EagleEngine.load(
            param["base_dir"], draft_dir=param.get("draft_dir") or None, tree=param["tree"],
            device=param.get("device", "cpu"), dtype=param.get("dtype", "float32"),
            max_seq_len=int(param["max_seq_len"]),
            draft_vocab=int(param["draft_vocab"]) if "draft_vocab" in param else None,
        )
        self.queue = queue.Queue()
        self.cancelled = OrderedDict()  # stream_key -> None, set by cancel requests (read by the worker thread)
        self.worker = threading.Thread(target=self._loop, name="eagle-engine", daemon=True)
        self.worker.start()

    def execute(self, requests):
        for request in requests:
            if _is_cancel_request(request):
                self._cancel(request)
            else:
                self.queue.put(request)
        return None

    def _cancel(self, request):
        """Mark a stream cancelled (the worker stops it at its next step, or skips it if still queued)."""
        key = int(_scalar(request, "stream_key", 0))
        if key:  # 0: a request that came without a key (not through the ensemble)
            self.cancelled[key] = None
        while len(self.cancelled) > MAX_CANCELLED_KEYS:
            self.cancelled.popitem(last=False)
        request.get_response_sender().send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        self.queue.put(None)
        self.worker.join(timeout=10)

    def _loop(self):
        while True:
            request = self.queue.get()
            if request is None:
                return
            sender = request.get_response_sender()
            try:
                self._generate(request, sender)
            except Exception as exc:  # noqa: BLE001 - every request gets an answer; the worker must live on
                message = f"generation failed: {type(exc).__name__}: {exc}"
                pb_utils.Logger.log_error(message)
                try:
                    sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                except Exception as send_exc:  # noqa: BLE001 - e.g. the request was already closed
                    pb_utils.Logger.log_error(f"could not report the failure: {send_exc}")

    def _generate(self, request, sender):
        from eagle_trt.runtime import SamplingParams

        input_ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().reshape(-1)  # [input_len]
        input_len = int(_scalar(request, "input_lengths", input_ids.size))
        prompt = [int(t) for t in input_ids[:input_len]]
        max_new = int(_scalar(request, "request_output_len", 16))
        end_id = int(_scalar(request, "end_id", -1))
        streaming = bool(_scalar(request, "streaming", False))
        exclude_input = bool(_scalar(request, "exclude_input_in_output", True))
        key = np.array([[int(_scalar(request, "stream_key", 0))]], dtype=np.uint64)
        seed = _scalar(request, "seed", None)
        sampling = SamplingParams(temperature=float(_scalar(request, "temperature", 0.0)),
                                  top_k=int(_scalar(request, "runtime_top_k", 0)),
                                  top_p=float(_scalar(request, "runtime_top_p", 1.0)),
                                  seed=None if seed is None else int(seed))
        stop_tensor = pb_utils.get_input_tensor_by_name(request, "stop_words_list")
        stop_sequences = unpack_stop_words(stop_tensor.as_numpy()) if stop_tensor is not None else []
        stop_token_ids = tuple(sorted({end_id, *(s[0] for s in stop_sequences if len(s) == 1)} - {-1}))
        multi_token_stops = [s for s in stop_sequences if len(s) > 1]
        stream_key = int(key[0, 0])
        if (stream_key and stream_key in self.cancelled) or sender.is_cancelled():  # while it waited in the queue
            pb_utils.Logger.log_info(f"request cancelled by the client before it started (stream {stream_key})")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return

        steps = self.engine.generate(prompt, max_new, sampling=sampling, stop_token_ids=stop_token_ids)
        generated, sent, cancelled = [], 0, False
        figures = (0.0, 0, 0)
        for step in steps:
            generated.extend(step.token_ids)
            figures = self._figures(steps, figures)
            cut = find_stop(generated, multi_token_stops, sent) if multi_token_stops else None
            if cut is not None:
                generated = generated[:cut]
            if streaming and len(generated) > sent:
                chunk = (prompt if (sent == 0 and not exclude_input) else []) + generated[sent:]
                sender.send(self._response(chunk, figures, key, finished=False))
                sent = len(generated)
            if cut is not None:
                break
            if sender.is_cancelled() or (stream_key and stream_key in self.cancelled):
                cancelled = True
                break
        close = getattr(steps, "close", None)
        if close is not None:
            close()
        stats = getattr(steps, "stats", None)
        if stats is not None:
            figures = (float(stats.acceptance_rate or 0.0), int(stats.num_accepted_draft_tokens),
                       int(stats.num_draft_tokens))
        if cancelled:
            pb_utils.Logger.log_info(f"request cancelled by the client after {len(generated)} of {max_new} tokens "
                                     f"(stream {stream_key})")
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return
        chunk = [] if streaming else ((prompt if not exclude_input else []) + generated)
        sender.send(self._response(chunk, figures, key, finished=True),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _figures(steps, previous):
        """Running (acceptance_rate, accepted drafts, drafted tokens) while the iterator is still going."""
        stats = getattr(steps, "stats", None)
        if stats is None:
            return previous
        try:
            return (float(stats.acceptance_rate or 0.0), int(stats.num_accepted_draft_tokens),
                    int(stats.num_draft_tokens))
        except (TypeError, ValueError, AttributeError):
            return previous

    @staticmethod
    def _response(tokens, figures, key, finished: bool):
        rate, accepted, drafted = figures
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("output_ids", np.array([[tokens]], dtype=np.int32).reshape(1, 1, len(tokens))),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32)),  # [1, 1]
            pb_utils.Tensor("acceptance_rate", np.array([[rate]], dtype=np.float32)),
            pb_utils.Tensor("total_accepted_draft_tokens", np.array([[accepted]], dtype=np.int32)),
            pb_utils.Tensor("total_draft_tokens", np.array([[drafted]], dtype=np.int32)),
            pb_utils.Tensor("stream_key", key),
            pb_utils.Tensor("finished", np.array([[finished]], dtype=bool)),
        ])

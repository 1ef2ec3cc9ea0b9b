"""Triton python model `eagle_engine` / `base_engine`: eagle_trt.runtime.EagleDecoder behind the tensorrt_llm
model's tensor contract (decoupled, streaming, CPU or GPU).

Inputs: input_ids, input_lengths, request_output_len, end_id, pad_id, streaming, temperature, runtime_top_k,
runtime_top_p, seed, stop_words_list ([2, L], TensorRT-LLM layout), return_perf_metrics, exclude_input_in_output,
and our stream_key. Outputs per response: output_ids [1, 1, n] (the tokens committed since the last response when
streaming, all of them otherwise), sequence_length [1, 1], acceptance_rate, total_accepted_draft_tokens,
total_draft_tokens (cumulative for the request, always filled), stream_key (passed through) and finished.
A streaming request ends with an empty response whose `finished` is true and which carries the final figures.
The same figures go to Triton's metrics port every round (python_models/acceptance_metrics.py, labelled with the
ensemble this engine serves, the bundle's tree and dtype).
What goes back to Triton (responses, metrics) leaves through an outbox thread, in order: each send is a round trip
to tritonserver (the stub waits for it, GIL released), and made on the worker thread it held up the next round's
forward (sends and metrics took 10-15 % of the worker's time at 4 streams; docs/load.md "Served rounds pay less to
Triton"). Responses are built on the worker: built on the outbox thread they cost more than they saved (its Python
then competes for the GIL with the worker's between forwards).

The same file serves both engines: `draft_dir` empty -> plain decoding through the same runtime code path.
Requests run on a worker thread (execute() only queues them), up to max_batch_size at once through
runtime.batching: one packed base forward per round for all of them and one packed draft forward per drafting
phase, each drafting with the tree the bundle's load policy gives its batch size. A cancelled request stops at the next
round (one that Triton cancelled: within CANCEL_POLL_S more). Cancelled means either Triton cancelled this
request (a gRPC cancel sent to this model directly) or a *cancel request* named its stream_key: input_lengths 0 and
request_output_len 0 with a stream_key. Postprocessing sends one when it sees that the eagle_model/base_model request it
serves was cancelled (HTTP client gone, gRPC cancel): Triton's ensemble cancels only the steps it schedules after the
cancellation, never the engine step already running (core ensemble_scheduler.cc, ScheduleSteps), so the engine would
otherwise generate for nobody until max_tokens.
Copied as model_repository/{eagle_engine,base_engine}/1/model.py.
"""

import json
import queue
import threading
import time
from collections import OrderedDict

import numpy as np
import triton_python_backend_utils as pb_utils
from model_params import bundle_spec, parameters  # beside model.py (layout.py copies it)


MAX_CANCELLED_KEYS = 4096  # remembered cancelled stream keys (oldest dropped first)
# Asking Triton whether a request was cancelled (sender.is_cancelled()) is a round trip from the stub to tritonserver:
# asked for every request every round it took 3-4 % of the engine's thread at 4 streams (py-spy, docs/load.md "Served
# rounds pay less to Triton"). A request asks at most this often; a cancel request's stream key is looked up locally,
# every round.
CANCEL_POLL_S = 0.05


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


def _stats_figures(stats):
    """(acceptance_rate, accepted drafts, drafted tokens) so far in the request, and the prompt tokens it did not
    prefill (runtime.prefix)."""
    return (float(stats.acceptance_rate or 0.0), int(stats.num_accepted_draft_tokens), int(stats.num_draft_tokens),
            int(stats.cached_prompt_tokens))


class RequestState:
    """One request as the worker sees it: what it asked for and what has been sent back."""

    def __init__(self, request, sender):
        self.sender = sender
        input_ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy().reshape(-1)  # [input_len]
        input_len = int(_scalar(request, "input_lengths", input_ids.size))
        self.prompt = [int(t) for t in input_ids[:input_len]]
        self.max_new = int(_scalar(request, "request_output_len", 16))
        end_id = int(_scalar(request, "end_id", -1))
        self.streaming = bool(_scalar(request, "streaming", False))
        self.exclude_input = bool(_scalar(request, "exclude_input_in_output", True))
        self.stream_key = int(_scalar(request, "stream_key", 0))
        self.key = np.array([[self.stream_key]], dtype=np.uint64)  # [1, 1]
        stop_tensor = pb_utils.get_input_tensor_by_name(request, "stop_words_list")
        stops = unpack_stop_words(stop_tensor.as_numpy()) if stop_tensor is not None else []
        self.stop_token_ids = tuple(sorted({end_id, *(s[0] for s in stops if len(s) == 1)} - {-1}))
        self.stop_sequences = [s for s in stops if len(s) > 1]  # stop words: the runtime cuts before them
        self.generated, self.sent, self.figures = [], 0, (0.0, 0, 0, 0)
        self.slot, self.closed, self.counter = None, False, None
        self.next_cancel_poll = 0.0  # time.monotonic() from which sender.is_cancelled() is asked again


class TritonPythonModel:
    def initialize(self, args):
        from eagle_trt.load_policy import LoadPolicy
        from eagle_trt.model_repository.layout import ENSEMBLES
        from eagle_trt.model_repository.python_models.acceptance_metrics import AcceptanceMetrics
        from eagle_trt.runtime import EagleDecoder
        from eagle_trt.runtime.backoff import Backoff
        from eagle_trt.runtime.batching import Batcher

        param = parameters(args)
        spec = bundle_spec(param)  # every value the decoder runs with; config.pbtxt adds the serving knobs
        speculative = param.get("speculative") == "true" and spec.draft is not None
        if spec.device == "cpu":
            import torch

            from eagle_trt.model_repository.configs import cpu_threads

            self.threads = cpu_threads(int(param.get("threads", 0)), int(param.get("engines_sharing", 1)))
            torch.set_num_threads(self.threads)
        self.decoder = EagleDecoder.from_bundle(spec, speculative)
        if param.get("backoff") == "true":  # per request, plain steps where they are faster (runtime.backoff)
            self.decoder = self.decoder.with_backoff()
        ensemble = {engine: name for name, engine in ENSEMBLES.items()}.get(args["model_name"], args["model_name"])
        self.metrics = AcceptanceMetrics(ensemble, spec.tree.label() if speculative else "none", spec.dtype)
        policy = LoadPolicy.from_list(json.loads(param["load_policy"]))  # base_engine's is [null]: plain decoding
        batch_backoff = Backoff() if param.get("batch_backoff") == "true" else None  # batches of 2+ (runtime.batching)
        self.batcher = Batcher(self.decoder, max(1, int(json.loads(args["model_config"]).get("max_batch_size") or 1)),
                               policy, reuse_prefix=param.get("prefix_reuse", "true") == "true",
                               batch_backoff=batch_backoff)
        self.queue, self.running = queue.Queue(), []
        self.cancelled = OrderedDict()  # stream_key -> None, set by cancel requests (read by the worker thread)
        self.outbox = queue.SimpleQueue()  # (fn, args, kwargs) to run in order on the outbox thread; None: stop
        self.outbox_thread = threading.Thread(target=self._send_loop, name="eagle-engine-outbox", daemon=True)
        self.outbox_thread.start()
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
        self.outbox.put(None)
        self.outbox_thread.join(timeout=10)
        self.metrics.close()

    def _post(self, fn, *args, **kwargs):
        """Run fn on the outbox thread, after everything posted before it (a failure is logged)."""
        self.outbox.put((fn, args, kwargs))

    def _send_loop(self):
        while (item := self.outbox.get()) is not None:
            fn, args, kwargs = item
            self._guarded(fn, *args, **kwargs)

    def _post_metrics(self):
        taken = self.metrics.take()
        if taken is not None:
            self._post(self.metrics.send, taken)

    def _loop(self):
        """Admit waiting requests up to the batch limit, run one round (one packed base forward for all running
        requests), answer what it produced; requests join and leave between rounds."""
        while self._admit_waiting():
            for slot, step in self._guarded(self.batcher.round, emit=self._on_steps) or ():
                self._guarded(self._on_step, slot.key, step)
            for state in self.running:
                if state.slot.done and state.slot.error is not None and not state.closed:
                    state.closed = True
                    self._fail(state.sender, state.slot.error)
                elif not state.slot.done and self._is_cancelled(state):
                    pb_utils.Logger.log_info(f"request cancelled by the client after {len(state.generated)} of "
                                             f"{state.max_new} tokens (stream {state.stream_key})")
                    self.batcher.cancel(state.slot)
                    state.closed = True
                    self._guarded(self.metrics.request_done, len(state.generated))
                    self._post_metrics()
                    self._post(state.sender.send, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            self.running = [s for s in self.running if not s.slot.done]
            self._post_metrics()  # the round's figures, counters summed over its requests

    def _admit_waiting(self) -> bool:
        """Take queued requests while there is room (wait for one when idle); False on shutdown."""
        while len(self.batcher.active) < self.batcher.max_batch:
            try:
                request = self.queue.get(block=not self.batcher.active)
            except queue.Empty:
                return True
            if request is None:
                return False
            self._admit(request)
        return True

    def _is_cancelled(self, state) -> bool:
        if state.stream_key and state.stream_key in self.cancelled:
            return True
        now = time.monotonic()
        if now < state.next_cancel_poll:
            return False
        state.next_cancel_poll = now + CANCEL_POLL_S
        return state.sender.is_cancelled()

    def _admit(self, request):
        from eagle_trt.model_repository.python_models.acceptance_metrics import RequestCounter
        from eagle_trt.runtime import SamplingParams

        sender = request.get_response_sender()
        try:
            state = RequestState(request, sender)
            if self._is_cancelled(state):  # while it waited in the queue
                pb_utils.Logger.log_info(f"request cancelled by the client before it started (stream "
                                         f"{state.stream_key})")
                self._post(sender.send, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            seed = _scalar(request, "seed", None)
            sampling = SamplingParams(temperature=float(_scalar(request, "temperature", 0.0)),
                                      top_k=int(_scalar(request, "runtime_top_k", 0)),
                                      top_p=float(_scalar(request, "runtime_top_p", 1.0)),
                                      seed=None if seed is None else int(seed))
            state.slot = self.batcher.start(state.prompt, state.max_new, sampling, state.stop_token_ids, key=state,
                                            stop_sequences=state.stop_sequences)
            state.counter = RequestCounter(self.metrics)
            pb_utils.Logger.log_info(f"request started with {len(self.batcher.active)} running, tree "
                                     f"{state.slot.tree_label} (stream {state.stream_key})")
        except Exception as exc:  # noqa: BLE001 - a bad request gets an error answer, the others run on
            self._fail(sender, exc)
            return
        self.running.append(state)

    def _on_steps(self, events):
        """The last round's outputs, sent before the next round's forwards run."""
        for slot, step in events:
            self._guarded(self._on_step, slot.key, step)

    def _on_step(self, state, step):
        # a stop word that began in tokens already streamed cannot be taken back from the client (runtime.stops)
        state.generated = state.generated[:len(state.generated) - step.retract] + step.token_ids
        state.figures = _stats_figures(step.stats)
        self._guarded(state.counter.step, step.stats)
        if state.streaming and len(state.generated) > state.sent:
            chunk = (state.prompt if (state.sent == 0 and not state.exclude_input) else []) + state.generated[state.sent:]
            self._post(state.sender.send, self._response(chunk, state.figures, state.key, finished=False))
            state.sent = len(state.generated)
        if step.finish_reason is not None:
            chunk = [] if state.streaming else ((state.prompt if not state.exclude_input else []) + state.generated)
            state.closed = True
            self._guarded(self.metrics.request_done, len(state.generated))
            self._post_metrics()  # before the answer: a client holding it reads counters that count it
            self._post(state.sender.send, self._response(chunk, state.figures, state.key, finished=True),
                       flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _fail(self, sender, exc):
        message = f"generation failed: {type(exc).__name__}: {exc}"
        pb_utils.Logger.log_error(message)
        self._post(sender.send, pb_utils.InferenceResponse(error=pb_utils.TritonError(message)),
                   flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _guarded(fn, *args, **kwargs):
        """Run fn; log (never raise) a failure, e.g. sending to a request the client already closed."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the worker must live on
            pb_utils.Logger.log_error(f"{getattr(fn, '__name__', fn)} failed: {type(exc).__name__}: {exc}")
            return None

    @staticmethod
    def _response(tokens, figures, key, finished: bool):
        rate, accepted, drafted, cached = figures
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("output_ids", np.array([[tokens]], dtype=np.int32).reshape(1, 1, len(tokens))),
            pb_utils.Tensor("sequence_length", np.array([[len(tokens)]], dtype=np.int32)),  # [1, 1]
            pb_utils.Tensor("acceptance_rate", np.array([[rate]], dtype=np.float32)),
            pb_utils.Tensor("total_accepted_draft_tokens", np.array([[accepted]], dtype=np.int32)),
            pb_utils.Tensor("total_draft_tokens", np.array([[drafted]], dtype=np.int32)),
            pb_utils.Tensor("stream_key", key),
            pb_utils.Tensor("finished", np.array([[finished]], dtype=bool)),
            pb_utils.Tensor("cached_prompt_tokens", np.array([[cached]], dtype=np.int32)),  # [1, 1]
        ])

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
Triton; a cancelled request (client gone) stops at the next verify step.
Copied as model_repository/{eagle_engine,base_engine}/1/model.py.
"""

import queue
import threading

import numpy as np
import triton_python_backend_utils as pb_utils
from model_params import local_dir, parameters  # beside model.py (layout.py copies it)


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


class TritonPythonModel:
    def initialize(self, args):
        from eagle_trt.runtime import EagleEngine

        param = parameters(args)
        self.engine = EagleEngine.load(
            local_dir(param, "base_dir"), draft_dir=local_dir(param, "draft_dir") if param.get("draft_dir") else None,
            tree=param["tree"],
            device=param.get("device", "cpu"), dtype=param.get("dtype", "float32"),
            max_seq_len=int(param["max_seq_len"]),
            draft_vocab=int(param["draft_vocab"]) if "draft_vocab" in param else None,
        )
        self.queue = queue.Queue()
        self.worker = threading.Thread(target=self._loop, name="eagle-engine", daemon=True)
        self.worker.start()

    def execute(self, requests):
        for request in requests:
            self.queue.put(request)
        return None

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
            if sender.is_cancelled():  # gRPC cancellation (Triton forwards no HTTP disconnect)
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
            pb_utils.Logger.log_info(f"request cancelled by the client after {len(generated)} of {max_new} tokens")
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

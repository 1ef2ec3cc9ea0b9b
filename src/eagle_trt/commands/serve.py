"""`eagle-trt serve OUT`: run tritonserver on a bundle's model repository until Ctrl-C, supervised: a server that
dies is restarted, an engine whose stub process died is reloaded (serving.supervisor). It prints the endpoints,
the metrics endpoint among them (the acceptance metrics of eagle_trt.metrics beside Triton's own)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import click

from eagle_trt.deploy.kubernetes import TRITON_PORTS
from eagle_trt.metrics import ACCEPTED_TOKENS_PER_STEP
from eagle_trt.serving.supervisor import MAX_FAST_FAILURES

METRICS_LINE = f"eagle_trt_*_total, {ACCEPTED_TOKENS_PER_STEP.name} by model, tree, dtype"


@click.command("serve")
@click.argument("bundle", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--load", "models", multiple=True, metavar="MODEL",
              help="Model to load (repeatable; default eagle_model and base_model). Ensembles bring what they use.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--http-port", type=int, default=TRITON_PORTS["http"], show_default=True)
@click.option("--grpc-port", type=int, default=TRITON_PORTS["grpc"], show_default=True)
@click.option("--metrics-port", type=int, default=TRITON_PORTS["metrics"], show_default=True)
@click.option("--openai-port", type=click.IntRange(1, 65535), default=None,
              help="Also serve an OpenAI-compatible API (/v1/models, /v1/chat/completions, /v1/completions) here.")
@click.option("--log-file", type=click.Path(path_type=Path), help="Server log (default OUT/tritonserver.log).")
@click.option("--timeout", type=float, default=900, show_default=True, help="Seconds to wait for readiness.")
@click.option("--json", "as_json", is_flag=True, help="Print the endpoints as one JSON line once ready.")
@click.option("--max-fast-failures", type=click.IntRange(0), default=MAX_FAST_FAILURES, show_default=True,
              help="Give up (exit 1) after this many server deaths in a row, each soon after a start.")
def serve_cmd(bundle, models, host, http_port, grpc_port, metrics_port, openai_port, log_file, timeout, as_json,
              max_fast_failures):
    """Serve a bundle with tritonserver (explicit model control) until Ctrl-C; restart it when it dies and reload
    an engine model whose process died.

    \b
    Examples:
      eagle-trt serve out
      eagle-trt serve out --load eagle_model --http-port 9000 --grpc-port 9001 --metrics-port 9002
      eagle-trt serve out --openai-port 9000   # then: OpenAI(base_url="http://127.0.0.1:9000/v1", api_key="-")
    """
    from eagle_trt.serving import DEFAULT_MODELS, Supervisor, TritonServer

    repo = bundle / "model_repository"
    server = TritonServer(repo, models=models or DEFAULT_MODELS, host=host, http_port=http_port,
                          grpc_port=grpc_port, metrics_port=metrics_port,
                          log_file=log_file or bundle / "tritonserver.log")
    started = time.monotonic()
    click.echo(f"starting tritonserver on {repo} (log {server.log_file})", err=True)
    # `kill` stops the server as cleanly as Ctrl-C; SIGINT is set too because a shell starts background jobs with
    # it ignored (`eagle-trt serve ... &`), and a `kill -INT` should still stop the server, not be lost
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    openai = None
    try:
        server.start(timeout=timeout)
        if openai_port is not None:
            from eagle_trt.serving.openai_api import OpenAIRoute

            openai = OpenAIRoute.from_bundle(bundle, triton_url=server.http_url, models=list(server.models))
            openai.start(host, openai_port)
        ready_s = time.monotonic() - started
        endpoints = {"http": server.http_url, "grpc": server.grpc_url, "metrics": server.metrics_url,
                     "models": list(server.models), "ready_s": round(ready_s, 1)}
        if openai is not None:
            endpoints["openai"] = openai.url + "/v1"
        if as_json:
            click.echo(json.dumps(endpoints), nl=True)
        else:
            click.echo(f"ready in {ready_s:.1f} s: models {', '.join(server.models)}")
            click.echo(f"  HTTP     {server.http_url}   (POST /v2/models/eagle_model/generate[_stream])")
            click.echo(f"  gRPC     {server.grpc_url}")
            click.echo(f"  metrics  {server.metrics_url}   (acceptance: {METRICS_LINE}; docs/metrics.md)")
            if openai is not None:
                click.echo(f"  OpenAI   {openai.url}/v1   (/models, /chat/completions, /completions)")
            click.echo(f"  try: eagle-trt generate --url {server.http_url} --model {server.models[0]} --stream 'Hello'")
            click.echo("Ctrl-C to stop", err=True)
        Supervisor(server, max_fast_failures=max_fast_failures, ready_timeout=timeout, events=_event).run()
    except KeyboardInterrupt:
        click.echo("stopping tritonserver ...", err=True)
    finally:
        if openai is not None:
            openai.stop()
        code = server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if code is not None:
            click.echo(f"tritonserver stopped (exit code {code})", err=True)


def _event(line: str) -> None:
    click.echo(f"{time.strftime('%H:%M:%S')} {line}", err=True)


def _interrupt(signum, frame):
    raise KeyboardInterrupt

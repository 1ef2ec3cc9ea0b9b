"""The PromQL a deployed bundle is watched and scaled by: the PrometheusRule (queue:compute ratio for the HPA) and the
Grafana dashboard (tok/s, TTFT/ITL, queue time, acceptance, suffix-automaton drafts), every metric name taken from
`eagle_trt.metrics`.

The rule follows triton-inference-server/tutorials (Deployment/Kubernetes/EKS_Multinode_Triton_TRTLLM/
multinode_helm_chart/triton-metrics_prometheus-rule.yaml, used by TensorRT-LLM_Autoscaling_and_Load_Balancing):
`rate(nv_inference_queue_duration_us[1m]) / clamp_min(rate(nv_inference_compute_infer_duration_us[1m]), 1)`
recorded as `triton:queue_compute:ratio`, here summed per pod over the engine models (where requests wait), so
the HPA's Pods metric has one series per pod. TTFT is Triton's `nv_inference_first_response_histogram_ms`
(`tritonserver --metrics-config histogram_latencies=true`): the time to the first streamed response. ITL is
derived: (request time - first-response time) / (tokens - requests), the mean gap between a request's tokens.
"""

from __future__ import annotations

from eagle_trt import metrics as M
from eagle_trt.spec import MODELS

QUEUE_COMPUTE_RATIO = "triton:queue_compute:ratio"  # the tutorial's record name; the HPA's metric
RULE_WINDOW = "1m"
RULE_INTERVAL = "6s"
TRITON_METRICS_CONFIG = "histogram_latencies=true"  # tritonserver --metrics-config: exports TTFT_HISTOGRAM
_RATE = "$__rate_interval"  # Grafana's rate window


def _triton(name: str) -> str:
    """A Triton metric name, checked against metrics.TRITON_METRICS (the one list of names we query)."""
    if name not in M.TRITON_METRICS:
        raise KeyError(f"{name} is not in eagle_trt.metrics.TRITON_METRICS")
    return name


TTFT_HISTOGRAM = _triton("nv_inference_first_response_histogram_ms")


def _models(models) -> str:
    return "|".join(models)


def queue_compute_ratio(engine_models) -> str:
    sel = f'{{model=~"{_models(engine_models)}"}}'
    queue = f"sum by (namespace, pod) (rate({_triton('nv_inference_queue_duration_us')}{sel}[{RULE_WINDOW}]))"
    compute = (f"sum by (namespace, pod) (rate({_triton('nv_inference_compute_infer_duration_us')}{sel}"
               f"[{RULE_WINDOW}]))")
    return f"{queue} / clamp_min({compute}, 1)"


def prometheus_rule_groups(engine_models) -> list[dict]:
    return [{"name": "eagle-trt-autoscaling", "interval": RULE_INTERVAL,
             "rules": [{"record": QUEUE_COMPUTE_RATIO, "expr": queue_compute_ratio(engine_models)}]}]


# ---- the dashboard ------------------------------------------------------------------------------------------------
def _sum_rate(name: str, where: str = '{model=~"$model"}') -> str:
    return f"sum by (model) (rate({name}{where}[{_RATE}]))"


def dashboard_panels() -> list[dict]:
    """[{title, unit, targets: [(legend, expr)]}], in display order."""
    ttft = TTFT_HISTOGRAM
    tokens, requests = _sum_rate(M.OUTPUT_TOKENS.name), _sum_rate(M.REQUESTS.name)
    request_ms = f"{_sum_rate(_triton('nv_inference_request_duration_us'))} / 1000"
    first_ms = _sum_rate(f"{ttft}_sum")
    quantile = "histogram_quantile({q}, sum by (le, model) (rate(" + ttft + '_bucket{{model=~"$model"}}[' + _RATE + "])))"
    success = _sum_rate(_triton("nv_inference_request_success"))
    return [
        {"title": "Output tokens/s", "unit": "short", "targets": [("{{model}}", tokens)]},
        {"title": "Requests/s", "unit": "reqps", "targets": [
            ("{{model}} ok", success),
            ("{{model}} failed", _sum_rate(_triton("nv_inference_request_failure")))]},
        {"title": "TTFT (first streamed response)", "unit": "ms", "targets": [
            ("{{model}} p50", quantile.format(q=0.5)), ("{{model}} p95", quantile.format(q=0.95))]},
        {"title": "ITL (mean gap between tokens)", "unit": "ms", "targets": [
            ("{{model}}", f"({request_ms} - {first_ms}) / clamp_min({tokens} - {requests}, 1)")]},
        {"title": "Queue time per request", "unit": "ms", "targets": [
            ("{{model}}", f"{_sum_rate(_triton('nv_inference_queue_duration_us'))} / 1000 / clamp_min({success}, 1)")]},
        {"title": "Queue:compute ratio (HPA metric)", "unit": "short", "targets": [
            ("{{pod}}", QUEUE_COMPUTE_RATIO)]},
        {"title": "Draft acceptance rate", "unit": "percentunit", "targets": [
            ("{{model}}", f"{_sum_rate(M.ACCEPTED_DRAFT_TOKENS.name)} / clamp_min({_sum_rate(M.DRAFT_TOKENS.name)}, 1)")]},
        {"title": "Tokens per verify step", "unit": "short", "targets": [
            ("{{model}}", f"{tokens} / clamp_min({_sum_rate(M.VERIFY_STEPS.name)}, 1)")]},
        {"title": "Suffix-automaton drafts (pytorch engine)", "unit": "short", "targets": [
            ("{{model}} proposed/s", _sum_rate(M.SUFFIX_TOKENS.name)),
            ("{{model}} accepted/s", _sum_rate(M.ACCEPTED_SUFFIX_TOKENS.name))]},
    ]


def grafana_dashboard(title: str) -> dict:
    """A Grafana dashboard (JSON model, schemaVersion 39) with a Prometheus data-source variable and a model
    variable (eagle_model, base_model by default)."""
    panels = []
    for i, panel in enumerate(dashboard_panels()):
        panels.append({
            "id": i + 1, "type": "timeseries", "title": panel["title"],
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
            "fieldConfig": {"defaults": {"unit": panel["unit"]}, "overrides": []},
            "targets": [{"refId": chr(ord("A") + j), "expr": expr, "legendFormat": legend,
                         "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                        for j, (legend, expr) in enumerate(panel["targets"])],
        })
    return {
        "title": title, "uid": "eagle-trt", "schemaVersion": 39, "version": 1, "editable": True,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s", "tags": ["eagle-trt", "triton"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "model", "type": "custom", "label": "model", "multi": True, "includeAll": False,
             "query": ",".join(MODELS),
             "current": {"text": list(MODELS), "value": list(MODELS)},
             "options": [{"text": m, "value": m, "selected": True} for m in MODELS]},
        ]},
        "panels": panels,
    }


def promql_exprs(dashboard: dict, rule_groups: list[dict]) -> list[str]:
    """Every PromQL expression in a dashboard and a rule's groups (what the tests parse)."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    return exprs + [r["expr"] for g in rule_groups for r in g["rules"]]

"""Acceptance from a server's metrics endpoint (eagle_trt.metrics), for runs whose responses carry no per-request
figures: `perf run` scrapes before and after each model's run and keeps the difference (`around`).

The difference covers every request the server finished in between, AIPerf's warm-up requests included, and any
other client's: the ratios (acceptance rate, mean accepted length) are what it is good for.
"""

from __future__ import annotations

import urllib.error
import urllib.request

from eagle_trt.metrics import AcceptanceCounts

SCRAPE_TIMEOUT_S = 10.0


def scrape_acceptance(metrics_url: str | None, model: str) -> AcceptanceCounts | None:
    """`model`'s counters now; None without a URL or when the endpoint does not answer."""
    if not metrics_url:
        return None
    try:
        with urllib.request.urlopen(metrics_url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError):
        return None
    return AcceptanceCounts.from_metrics(text, model)


def around(metrics_url: str | None, model: str, run):
    """run() -> result, with result.scraped = the model's counters after minus before (None when unreadable)."""
    before = scrape_acceptance(metrics_url, model)
    result = run()
    after = scrape_acceptance(metrics_url, model) if before is not None else None
    result.scraped = after.delta(before) if after is not None else None
    return result

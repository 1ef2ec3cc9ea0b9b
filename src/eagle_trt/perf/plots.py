"""PNG plots for the perf report (matplotlib, headless): throughput, TTFT/ITL distributions, accepted lengths,
speedup per category."""

from __future__ import annotations

from pathlib import Path

from eagle_trt.spec import MODELS


def write_plots(report: dict, eagle, base, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []

    def save(fig, name):
        path = out_dir / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    values = [report["eagle"]["output_token_throughput"] or 0, report["base"]["output_token_throughput"] or 0]
    ax.bar(list(MODELS), values, color=["#2a7", "#888"])
    ax.set_ylabel("output tokens/s (concurrency 1)")
    speedup = report["speedup"]
    ax.set_title(f"speedup {speedup:.2f}x" if speedup else "throughput")
    save(fig, "throughput.png")

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, attr, label in ((axes[0], "ttft_ms", "TTFT (ms)"), (axes[1], "itl_ms", "inter-token latency (ms)")):
        for run, color in ((eagle, "#2a7"), (base, "#888")):
            data = [getattr(r, attr) for r in run.requests if getattr(r, attr) is not None]
            if data:
                ax.hist(data, bins=20, alpha=0.6, color=color, label=run.model)
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    save(fig, "latency_distributions.png")

    hist = report["accepted_length_histogram"]
    if hist:
        fig, ax = plt.subplots(figsize=(4.5, 3.5))
        ax.bar(list(hist.keys()), list(hist.values()), color="#2a7")
        ax.set_xlabel("accepted length (tokens per verify step)")
        ax.set_ylabel("steps")
        ax.set_title(f"mean {report['mean_accepted_length']:.2f}")
        save(fig, "accepted_length.png")

    cats = report["per_category_speedup"]
    if cats:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.bar(list(cats.keys()), list(cats.values()), color="#2a7")
        ax.axhline(1.0, color="#c33", lw=1)
        ax.set_ylabel("speedup")
        ax.tick_params(axis="x", rotation=30)
        save(fig, "speedup_per_category.png")
    return paths

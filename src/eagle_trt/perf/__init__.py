"""Benchmark drivers and reports: the AIPerf harness and its files, perf run/load, report and plots, the runtime
benchmark."""

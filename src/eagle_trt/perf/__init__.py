"""Benchmarks and reports: datasets, the AIPerf harness, report and plots, the runtime benchmark."""

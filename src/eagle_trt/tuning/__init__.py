"""Tuning the pytorch engine's tree to measured costs: profile (step costs), tree_tuner (the cost model and tree
search), calibrate (`--tree auto`: measure, choose, cache)."""

TUNE_BUDGET_S = 900.0  # default bound on one tuning run (seconds): candidates not started by then are skipped

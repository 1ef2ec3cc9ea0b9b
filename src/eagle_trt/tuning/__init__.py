"""Tuning the pytorch engine's tree to measured costs: profile (step costs), tree_tuner (the cost model and tree
search), calibrate (`--tree auto`: measure, choose, cache)."""

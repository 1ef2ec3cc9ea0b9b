#!/usr/bin/env bash
# Reproduce the shipped EAGLE-1 draft for SmolLM2-135M-Instruct (src/eagle_trt/data/drafts/smollm2-eagle1).
# CPU, 2 cores: ~35 min of data generation (384 answered + 1500 teacher-forced ShareGPT prompts; MT-bench and
# HumanEval are excluded by the tool) and ~15 min of training (300 steps of a 6-epoch schedule).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/smollm2-eagle1}
PROMPTS=${PROMPTS:-../shared/data/sharegpt_prompts.jsonl}
BASE=$(.venv/bin/eagle-trt demo-model | tail -1)
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$OUT" --format eagle1 \
  --max-prompts 384 --gen-tokens 128 --extra-prompts 1500 --epochs 6 --max-steps 300 --lr 1e-3 \
  --batch-size 2048 --seed 0 --resume --force
cp "$OUT"/config.json "$OUT"/model.safetensors src/eagle_trt/data/drafts/smollm2-eagle1/

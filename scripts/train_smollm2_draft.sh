#!/usr/bin/env bash
# Reproduce the shipped EAGLE-1 draft for SmolLM2-135M-Instruct (src/eagle_trt/data/drafts/smollm2-eagle1).
# CPU, 2 cores: about an hour. Prompts: ShareGPT first user turns (MT-bench and HumanEval are excluded by the tool).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-build/smollm2-eagle1}
PROMPTS=${PROMPTS:-../shared/data/sharegpt_prompts.jsonl}
BASE=$(.venv/bin/eagle-trt demo-model | tail -1)
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$OUT" --format eagle1 \
  --max-prompts 384 --gen-tokens 128 --epochs 4 --lr 1e-3 --batch-size 2048 --seed 0 --resume --force
cp -r "$OUT"/. src/eagle_trt/data/drafts/smollm2-eagle1/

#!/usr/bin/env bash
# Reproduce the shipped drafts for SmolLM2-135M-Instruct:
#   src/eagle_trt/data/drafts/smollm2-eagle1 (EAGLE-1/2) and src/eagle_trt/data/drafts/smollm2-eagle3 (EAGLE-3).
# CPU, 2 cores: ~35 min of data generation (384 answered + 1500 teacher-forced ShareGPT prompts; MT-bench and
# HumanEval are excluded by the tool), ~25 min of EAGLE-1 training (681 steps = 6 epochs), then the EAGLE-3 run
# reuses the same answers from the EAGLE-1 work dir (it only adds the three captured layers) and trains with
# training-time test.
# Usage: scripts/train_smollm2_draft.sh [WORK_DIR]   (WORK_DIR defaults to build/drafts)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-build/drafts}
PROMPTS=${PROMPTS:-../shared/data/sharegpt_prompts.jsonl}
BASE=$(.venv/bin/eagle-trt demo-model | tail -1)
DATA=(--max-prompts 384 --gen-tokens 128 --batch-size 2048 --seed 0)
mkdir -p "$WORK"
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$WORK/eagle1" --format eagle1 \
  "${DATA[@]}" --extra-prompts 1500 --epochs 6 --lr 1e-3 --resume --force
cp "$WORK"/eagle1/config.json "$WORK"/eagle1/model.safetensors src/eagle_trt/data/drafts/smollm2-eagle1/
# EAGLE-3 on the same answers: start from a copy of the EAGLE-1 work dir's data shards. The shipped EAGLE-3 draft
# used the answered prompts only (--extra-prompts 0: adding the three captured layers to the 1500 teacher-forced
# records costs ~1 s each on one CPU thread), 2 epochs = 84 steps, ~19 min on one thread.
mkdir -p "$WORK/eagle3.work"
cp -rn "$WORK/eagle1.work/data" "$WORK/eagle1.work/data_prompts" "$WORK/eagle1.work/prompts.json" "$WORK/eagle3.work/"
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$WORK/eagle3" --format eagle3 \
  "${DATA[@]}" ${EAGLE3_ARGS:---extra-prompts 0 --epochs 2 --lr 1e-3 --draft-vocab 8192 --ttt-steps 3} --resume --force
mkdir -p src/eagle_trt/data/drafts/smollm2-eagle3
cp "$WORK"/eagle3/config.json "$WORK"/eagle3/model.safetensors src/eagle_trt/data/drafts/smollm2-eagle3/

#!/usr/bin/env bash
# Reproduce the shipped drafts for SmolLM2-135M-Instruct:
#   src/eagle_trt/data/drafts/smollm2-eagle1 (EAGLE-1/2) and src/eagle_trt/data/drafts/smollm2-eagle3 (EAGLE-3).
# They were trained on one H100 (2026-11-23): the base answered all 7978 ShareGPT first turns (greedy, up to 256
# tokens; MT-bench and HumanEval prompts are excluded by the tool) in 9 min, EAGLE-1 trained 10 epochs (5977 steps
# of 4096 rows) in 3.4 min; the EAGLE-3 run reuses the same answers from the EAGLE-1 work dir, adds the three
# captured layers by one teacher-forced pass (4.8 min) and trains 3 epochs of training-time test (2.6 min).
# DEVICE=cpu works too (same commands), but answering 8k prompts on a 2-core CPU takes many hours: lower
# --max-prompts there (the earlier CPU-trained drafts used 384 answered prompts; see the drafts' READMEs).
# Usage: scripts/train_smollm2_draft.sh [WORK_DIR]   (WORK_DIR defaults to build/drafts)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${1:-build/drafts}
PROMPTS=${PROMPTS:-../shared/data/sharegpt_prompts.jsonl}
DEVICE=${DEVICE:-cuda}
BASE=$(.venv/bin/eagle-trt demo-model | tail -1)
DATA=(--max-prompts 8000 --gen-tokens 256 --gen-batch-size 512 --seed 0 --device "$DEVICE")
mkdir -p "$WORK"
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$WORK/eagle1" --format eagle1 \
  "${DATA[@]}" --batch-size 4096 --epochs 10 --lr 1e-3 --resume --force
cp "$WORK"/eagle1/config.json "$WORK"/eagle1/model.safetensors src/eagle_trt/data/drafts/smollm2-eagle1/
# EAGLE-3 on the same answers: start from a copy of the EAGLE-1 work dir's data shards.
mkdir -p "$WORK/eagle3.work"
cp -rn "$WORK/eagle1.work/data" "$WORK/eagle1.work/prompts.json" "$WORK/eagle3.work/"
.venv/bin/eagle-trt train-draft --base "$BASE" --prompts "$PROMPTS" -o "$WORK/eagle3" --format eagle3 \
  "${DATA[@]}" --batch-size 4096 --epochs 3 --lr 1e-3 --draft-vocab-size 8192 --ttt-steps 3 --resume --force
mkdir -p src/eagle_trt/data/drafts/smollm2-eagle3
cp "$WORK"/eagle3/config.json "$WORK"/eagle3/model.safetensors src/eagle_trt/data/drafts/smollm2-eagle3/

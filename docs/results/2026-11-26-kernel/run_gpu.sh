#!/usr/bin/env bash
# The device runs behind this folder (results land in $OUT). From the repository root:
#   STEPS="tests bench gpu sweep flex" bash docs/results/2026-11-26-kernel/run_gpu.sh
# Each benchmark prints and saves its rows as they finish, so a step cut short by its timeout keeps what it measured.
# Needs PyTorch, Triton and pytest (the device image has them); the package runs from src/ without installing.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
STEPS=${STEPS:-tests bench gpu sweep flex}
export PYTHONPATH=$PWD/src:$PWD/tests
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__,
'transformers', transformers.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
} 2>&1 | tee "$OUT/device.txt"
t0=$SECONDS
if [[ $STEPS == *tests* ]]; then
  echo "== kernel tests (CUDA: every CPU case plus the full sizes)"
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_tree_attention.py 2>&1 | tail -30 > "$OUT/pytest_kernel.txt"
  tail -4 "$OUT/pytest_kernel.txt"
fi
if [[ $STEPS == *bench* ]]; then
  echo "== kernel benchmark ($((SECONDS - t0)) s so far)"
  timeout 240 python3 -m eagle_trt.kernels.bench --json-out "$OUT/tree_attention_kernel.json" 2>&1 \
    | tee "$OUT/bench_kernel.txt" | grep -v '^| llama3-8b | 8\|^| smollm2 | 8'
fi
if [[ $STEPS == *sweep* ]]; then
  echo "== launch-setting sweep ($((SECONDS - t0)) s so far)"
  timeout 240 python3 -m eagle_trt.kernels.bench --sweep --json-out "$OUT/tree_attention_sweep.json" 2>&1 \
    | tee "$OUT/sweep_kernel.txt"
fi
if [[ $STEPS == *gpu* ]]; then
  echo "== pytest -m gpu over tests/ ($((SECONDS - t0)) s so far)"
  timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests --continue-on-collection-errors 2>&1 | tail -15 \
    | tee "$OUT/pytest_gpu.txt"
fi
if [[ $STEPS == *flex* ]]; then
  echo "== FlexAttention rows ($((SECONDS - t0)) s so far)"
  timeout 240 python3 -m eagle_trt.kernels.bench --flex --json-out "$OUT/tree_attention_kernel_flex.json" \
    > "$OUT/bench_kernel_flex.txt" 2>&1
  grep -E '^\| (llama3-8b|smollm2) \| 1 \| .* \| (4096|8192) \|' "$OUT/bench_kernel_flex.txt"
fi
echo "== done in $((SECONDS - t0)) s"

cd /work/main
for i in 1 2; do
  for b in nq8_nb nq8; do
    echo "== $b run $i"
    .venv/bin/eagle-trt perf load /tmp/exp/$b --concurrency 1,2 --requests-per-stream 4 --max-tokens 64 --rounds 2 2>&1 | grep "alone"
  done
done

set -e
cd /work/main
E=.venv/bin/eagle-trt
B=$($E demo-model --gguf-dir | tail -1); D=$($E demo-model --draft | tail -1)
git rev-parse --short HEAD; git diff --stat | tail -1
for m in auto on; do
  $E build --base $B --draft $D --engine pytorch --device cpu --dtype native-q8 --tree "chain:1+suffix:4,8" --backoff $m -o /tmp/exp/s7/nq8_$m --force > /tmp/exp/s7/build_$m.log 2>&1
  grep -A2 '"backoff"\|"batch_backoff"' /tmp/exp/s7/nq8_$m/model_repository/eagle_engine/config.pbtxt | grep string_value
done
for i in 1 2; do for m in auto on; do
  echo "== $m run $i $(date +%T)"
  $E perf load /tmp/exp/s7/nq8_$m --concurrency 1,2 --requests-per-stream 4 --rounds 3 -o /tmp/exp/s7/ab_${m}_$i > /tmp/exp/s7/ab_${m}_$i.log 2>&1
  grep -E "^\| [0-9]|eagle_engine" /tmp/exp/s7/ab_${m}_$i.log
done; done
date +%T

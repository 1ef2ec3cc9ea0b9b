#!/bin/bash
# py-spy the eagle engine during its phase and the base engine during its phase of one perf load run
source /work/main/.venv/bin/activate; cd /tmp
B=${1:-/tmp/nq8}; C=${2:-4}; R=${3:-20}; TAG=${4:-x}
eagle-trt perf load $B --concurrency $C --requests-per-stream $R --rounds 1 -o /tmp/load_spy > /tmp/load_spy.log 2>&1 &
until grep -q "AIPerf: eagle_model" /tmp/load_spy.log 2>/dev/null; do sleep 1; done; sleep 6
P=$(pgrep -f "triton_python_backend_stub.*eagle_engine" | head -1)
/tmp/pyspy/bin/py-spy record -p $P -d 10 -o /tmp/spy_eagle_$TAG.txt -f raw --idle --threads --nonblocking >/dev/null 2>&1
until grep -q "AIPerf: base_model" /tmp/load_spy.log 2>/dev/null; do sleep 1; done; sleep 6
P=$(pgrep -f "triton_python_backend_stub.*base_engine" | head -1)
/tmp/pyspy/bin/py-spy record -p $P -d 10 -o /tmp/spy_base_$TAG.txt -f raw --idle --threads --nonblocking >/dev/null 2>&1
wait; tail -1 /tmp/load_spy.log

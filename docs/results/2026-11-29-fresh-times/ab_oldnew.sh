#!/bin/bash
# e6d66ce (before this session) against 7002510+ (this session), each `scripts/stream_load.py --levels 2 --rounds 3`
# in its own process, alternating three times.
for i in 1 2 3; do
  for which in old new; do
    if [ $which = old ]; then dir=/tmp/old_wt; else dir=/work/main; fi
    echo "== $which run $i $(date +%T)"
    (cd $dir && PYTHONPATH=$dir/src /work/main/.venv/bin/python scripts/stream_load.py --levels 2 --rounds 3 --json /tmp/s39/ab_${which}_$i.json 2>&1 | grep "^| 2 ")
  done
done

# A/B of the engine at 348fc5b ("new") against 1ac2e92 ("old", the MT-bench run before), run from this directory:
#   git worktree add /tmp/wt_old 1ac2e92
B=$(eagle-trt demo-model --gguf-dir | tail -1); D=$(eagle-trt demo-model --draft | tail -1)
for r in 1 2; do
for v in new old; do
  if [ $v = old ]; then export PYTHONPATH=/tmp/wt_old/src; else unset PYTHONPATH; fi
  python -c "import eagle_trt; print('$v', eagle_trt.__file__)"
  eagle-trt bench --base $B --draft $D --dtype native-q8 --trees "chain:1+suffix:4,8" --prompts 24 --turns both \
      --json-out ab_${v}_$r.json 2>&1 | grep -E "^\| (plain|chain)"
done; done

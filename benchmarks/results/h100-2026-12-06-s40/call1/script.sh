#!/usr/bin/env bash
# s40 call: harness A/B on the FP8 block / per tensor prefill points (s37/s38 code)
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
OUT=$OUT/h PEERS=sglang,fusedmoe,fusedmoe-noblkw1,fusedmoe-ws,fusedmoe-ws-blkscalar,fusedmoe-wswide,fusedmoe-wspipe \
  PLAN_ARGS="--dtypes fp8_block fp8_tensor --tokens 512 2048 8192" \
  PRECOMPILE_ARGS="--dtypes fp8_block,fp8_tensor --tokens 512,2048,8192" BUDGET_S=${BUDGET_S:-240} \
  bash benchmarks/harness_run.sh > /tmp/c2.log 2>&1
tail -30 /tmp/c2.log
python3 .calls/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; cat $OUT/ratio.txt
cp /tmp/c2.log $OUT/h/log.txt
cd $OUT && tar czf h.tgz h && rm -rf h

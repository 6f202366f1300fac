#!/usr/bin/env bash
# s44 call 2: issue 3's harness on the H100 with the X_GATHER rule (fusedmoe) against it off (fusedmoe-noxg)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
OUT=$OUT/h PEERS=sglang,fusedmoe,fusedmoe-noxg BUDGET_S=${BUDGET_S:-300} timeout 520 bash benchmarks/harness_run.sh \
  > $OUT/h_log.txt 2>&1
grep -A12 "geomean\|region" $OUT/h/peers.log | tail -30
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; tail -28 $OUT/ratio.txt
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe-noxg > $OUT/ratio_noxg.txt 2>&1
cd $OUT && tar czf h.tgz h && rm -rf h

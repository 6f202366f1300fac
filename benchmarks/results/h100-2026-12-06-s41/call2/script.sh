#!/usr/bin/env bash
# s41 call 2: GPU tests of the tuned table's FP8 prefill entries, then the full shared harness (sglang, fusedmoe,
# fusedmoe-noaltrig)
export PYTHONPATH=$PWD/src
timeout 120 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 110 tests/test_triton_moe.py \
  -k "deepseek or dsv3 or real or shape or block" > $OUT/tm_gpu.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/tm_gpu.txt
OUT=$OUT/h PEERS=sglang,fusedmoe,fusedmoe-noaltrig BUDGET_S=${BUDGET_S:-300} timeout 440 bash benchmarks/harness_run.sh \
  > $OUT/h_log.txt 2>&1
grep -A12 "geomean\|region" $OUT/h/peers.log | tail -30
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; tail -28 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h

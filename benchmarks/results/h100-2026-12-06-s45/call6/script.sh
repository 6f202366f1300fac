#!/usr/bin/env bash
# s45 call 6: issue 3's harness with DYN "auto" (FP8, >= 64 local experts) and the H100 table's wide DeepSeek-V3 FP8
# GEMM1 tile at 8192 tokens (fusedmoe) against the static tiles (fusedmoe-nodyn); the default path's GPU tests run
# beside the harness's compile stage
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
export PEERS=sglang,fusedmoe,fusedmoe-nodyn BUDGET_S=${BUDGET_S:-280}
timeout 230 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_triton_moe.py \
  -k "deepseek or dsv3 or real or block" > $OUT/moe_gpu.txt 2>&1 &
t=$!
OUT=$OUT/h timeout 240 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1
wait $t; echo "tests rc=$?"; grep -E "FAILED|ERROR|passed|failed" $OUT/moe_gpu.txt | cut -c1-300 | tail -8
OUT=$OUT/h timeout 250 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe-nodyn > $OUT/ratio_nodyn.txt 2>&1
tail -6 $OUT/h_log.txt; tail -24 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h

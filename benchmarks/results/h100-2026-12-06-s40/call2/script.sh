#!/usr/bin/env bash
# s40: the align's early trigger -- GPU tests (same bits), then the harness A/B at 1 / 8 tokens
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_triton_moe.py \
  -k "split_k_cuda_graph or programmatic_dependent_launch_same_bits" > $OUT/altrig_tests.txt 2>&1
echo "tests rc=$?"; tail -4 $OUT/altrig_tests.txt
OUT=$OUT/d PEERS=sglang,fusedmoe,fusedmoe-altrig,fusedmoe-trigall PLAN_ARGS="--tokens 1 8" PRECOMPILE_ARGS="--tokens 1,8" \
  BUDGET_S=${BUDGET_S:-200} bash benchmarks/harness_run.sh > /tmp/c5.log 2>&1
tail -12 /tmp/c5.log
python3 .calls/peer_ratio.py $OUT/d/peers.jsonl fusedmoe > $OUT/ratio_altrig.txt 2>&1; tail -3 $OUT/ratio_altrig.txt
cp /tmp/c5.log $OUT/d/log.txt
cd $OUT && tar czf d.tgz d && rm -rf d

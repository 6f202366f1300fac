#!/usr/bin/env bash
# s49 call 8: after the table edits (Mixtral FP8 per channel 512 H100 entries removed; Nemotron FP8 per channel 8192
# GEMM1 256-column tile): harness at those points twice, then the kernel tests
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/env.txt
for r in 1 2; do
OUT=$OUT/h$r PEERS=sglang,fusedmoe BUDGET_S=120 PLAN_ARGS="--models mixtral nemotron --dtypes fp8_tensor fp8_channel --tokens 512 8192" \
  PRECOMPILE_ARGS="--models mixtral,nemotron --dtypes fp8_tensor,fp8_channel --tokens 512,8192" timeout 200 \
  bash benchmarks/harness_run.sh > $OUT/h_log$r.txt 2>&1; echo "harness $r rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h$r/peers.jsonl fusedmoe > $OUT/ratio$r.txt 2>&1; head -10 $OUT/ratio$r.txt
done
timeout 200 python3 -m pytest -m gpu -n 4 tests/test_triton_moe.py --timeout 300 -q -rfE --tb=short -p no:cacheprovider \
  > $OUT/t_moe.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/t_moe.txt
cd $OUT && tar czf h.tgz h1 h2 && rm -rf h1 h2

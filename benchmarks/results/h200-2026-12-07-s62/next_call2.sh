#!/usr/bin/env bash
# Planned in the sixty-second session: the next session's second call (carry .peers; ~560 s). On an H200: issue 3's
# full harness (last full H200 run: s54; since then the H200 entries of s54 and s62 and the rings' unsigned positions).
# On an H100: the FP4 prefill GPU tests under the sixty-second session's defaults, then the FP4 bench at 1536 / 2048
# tokens (NVFP4 at 48 rows an expert in the FP4 kernel).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  timeout 300 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 280 \
    tests/test_ws_fp4.py > $OUT/tests_fp4.txt 2>&1; echo "fp4 rc=$?"; tail -3 $OUT/tests_fp4.txt
  timeout 200 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano \
    --weight-format mxfp4,nvfp4 --tokens 1536,2048 --peers triton --quick-ceilings --no-progress --out $OUT/bench_fp4 \
    > $OUT/bench_fp4.txt 2>&1; echo "bench rc=$?"; grep -E "│ (gpt|nemo)|ceilings" $OUT/bench_fp4.txt | cut -c1-130
fi

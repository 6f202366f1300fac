#!/usr/bin/env bash
# session 16, call 2: the full GPU test suite (reciprocal quantization now the default); FP8 per-tensor prefill retune
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/gpu_tests.txt
left=$(( 560 - ($(date +%s)-T0) )); B=$(( left - 60 )); [ $B -gt 220 ] && B=220
echo "tune budget $B s"
if [ $B -gt 40 ]; then
  timeout $(( left - 10 )) python3 -m fusedmoe tune --preset nemotron-nano,qwen3-30b-a3b,minimax-m2 --weight-format fp8_tensor \
    --tokens 2048,8192 --max-candidates 10 --budget-s $B --report $OUT/tune_fp8t.json --no-progress > $OUT/tune_fp8t.txt 2>&1
  echo "tune rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/tune_fp8t.txt
  cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
fi
grep -v "warner\|Warning" $OUT/gpu_tests.txt | tail -8; grep "heuristic .* -> tuned" $OUT/tune_fp8t.txt

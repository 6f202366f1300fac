#!/usr/bin/env bash
# session 16, call 5: GEMM1-epilogue amax (same bits, time), GROUP_M of the ws GEMMs (harness A/B), the full GPU suite
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
T0=$(date +%s)
timeout 150 python3 -m pytest -q -rfE --tb=short -n 4 -p no:cacheprovider --timeout 140 tests/test_ws_gemm.py \
  tests/test_triton_moe.py tests/test_quant_kernels.py tests/test_triton_fp4.py \
  -k "amax or intermediate_quantization or fp8_tensor_dynamic or formats_x_activations" > $OUT/tests_amax.txt 2>&1
echo "amax tests rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/tests_amax.txt
for v in on off; do
  flag=""; [ $v = off ] && flag="--no-gemm1-amax"
  timeout 70 python3 benchmarks/kernel_breakdown.py --preset qwen3-30b-a3b,nemotron-nano,mixtral-8x7b \
    --weight-format fp8_tensor --tokens 2048,8192 --calls 6 $flag > $OUT/breakdown_amax_$v.txt 2>&1
  echo "breakdown $v rc=$? $(( $(date +%s)-T0 )) s"
done
t0=$(date +%s)
OUT=$W/h PEERS=sglang,fusedmoe,fusedmoe-g16,fusedmoe-g32 PLAN_ARGS="--dtypes fp8_tensor fp8_channel fp8_block --tokens 2048 8192" \
  PRECOMPILE_ARGS="--dtypes fp8_tensor,fp8_channel,fp8_block --tokens 2048,8192" \
  BUDGET_S=110 timeout 170 bash benchmarks/harness_run.sh > $OUT/harness_g.txt 2>&1; echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness_g.txt
cp $W/h/peers.txt $OUT/peers_g.txt 2>/dev/null; cp $W/h/peers.jsonl $OUT/peers_g.jsonl 2>/dev/null
left=$(( 585 - ($(date +%s)-T0) ))
echo "gpu suite: $left s left"
timeout $left python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 200 tests > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(( $(date +%s)-T0 )) s" | tee -a $OUT/gpu_tests.txt
grep -v "warner\|Warning" $OUT/tests_amax.txt | tail -4
grep -h "T=\|_kernel\|Fill" $OUT/breakdown_amax_on.txt | head -0
for v in on off; do echo "== $v"; grep -h "T=" $OUT/breakdown_amax_$v.txt | cut -c1-120; done
grep -A9 "^summary" $OUT/harness_g.txt | cut -c1-200; grep -v "warner\|Warning" $OUT/gpu_tests.txt | tail -5

#!/usr/bin/env bash
# session 15, final call: BF16 skip A/B at 8192 tokens, the full harness (two peers), the last GPU tests
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
W=$OUT/work; mkdir -p $W
t0=$(date +%s)
# the padding-half skip at BF16 prefill with many rows per expert, in both peer orders (call 4 saw 0.79-0.87x there)
for P in fusedmoe-noskip,fusedmoe fusedmoe,fusedmoe-noskip; do
  (cd .peers && timeout 45 python3 run_peers.py --peers $P --plugin ../benchmarks/harness_plugin.py --models dsv3 minimax_m2.5 nemotron \
     --dtypes bf16 --tokens 8192 --jobs 0 --budget-s 35 --no-ceilings --out $W/ab_$P) 2>&1 | grep -E "^ +M=" >> $OUT/skip_bf16.txt
done
echo "skip A/B $(( $(date +%s)-t0 )) s" | tee -a $OUT/skip_bf16.txt
t0=$(date +%s)
OUT=$W/h PEERS=sglang,fusedmoe BUDGET_S=200 timeout 260 bash benchmarks/harness_run.sh > $OUT/harness.txt 2>&1
echo "harness rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/harness.txt
cp $W/h/peers.txt $OUT/peers.txt 2>/dev/null; cp $W/h/peers.jsonl $OUT/peers.jsonl 2>/dev/null
t0=$(date +%s)
timeout 75 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 70 tests/test_layer_triton.py \
  "tests/test_ws_gemm.py::test_gpu_ws_skip_padding_half_same_bits" > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? $(( $(date +%s)-t0 )) s" | tee -a $OUT/gpu_tests.txt
tar czf $OUT/work.tgz -C $W .
cat $OUT/skip_bf16.txt; grep -A12 "^summary" $OUT/harness.txt | cut -c1-200; grep -v "warner\|Warning" $OUT/gpu_tests.txt | tail -6

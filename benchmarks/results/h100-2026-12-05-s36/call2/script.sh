#!/usr/bin/env bash
# s36 call 2. On an H100: the H200's tuned entries (table siblings) vs the heuristic -- FP4 decode A/B, the full
# shared harness with fusedmoe / fusedmoe-nosib / SGLang. On an H200: the full harness (issue 3's numbers on the
# current code) and the FP4 bench (issue 4). Then GPU kernel tests.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s36_c2.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$gpu"
peers=sglang,fusedmoe; [[ $gpu == *H100* ]] && peers=sglang,fusedmoe,fusedmoe-nosib
mkdir -p "$OUT/h"
OUT="$OUT/h" PEERS=$peers BUDGET_S=200 timeout 380 bash benchmarks/harness_run.sh > $OUT/harness_tail.txt 2>&1
el "harness rc=$?"
cp "$OUT/h/peers.log" "$OUT/peers.log" 2>/dev/null
(cd "$OUT" && tar czf h.tgz h && rm -rf h)
tail -9 $OUT/peers.log | cut -c1-160
if [[ $gpu == *H100* ]]; then
  timeout 100 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
    --weight-format mxfp4,nvfp4 --tokens 2,8,64 --rounds 2 --settings default,nosib > $OUT/ab_nosib.txt 2>&1
  el "ab rc=$?"
  grep -v "^\s*$" $OUT/ab_nosib.txt | tail -19 | cut -c1-110
else
  mkdir -p "$OUT/b"; OUT="$OUT/b" BENCH_FP4_TIMEOUT_S=170 bash benchmarks/device_run.sh bench-fp4 > $OUT/bench_fp4_tail.txt 2>&1
  el "bench-fp4 rc=$?"
  (cd "$OUT" && tar czf b.tgz b && rm -rf b)
  tail -22 $OUT/bench_fp4_tail.txt | cut -c1-160
fi
left=$(( 585 - ($(date +%s)-T0) ))
el "tests, $left s left"
timeout $left python3 -m pytest -m gpu -n 5 -p no:cacheprovider --timeout 150 -q -rfE tests/test_ws_gemm.py \
  tests/test_triton_moe.py > "$OUT/gpu_tests.txt" 2>&1
el "tests rc=$?"
grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.txt" | head -20; tail -2 "$OUT/gpu_tests.txt"

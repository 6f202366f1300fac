#!/usr/bin/env bash
# s37 call 4 (H100): tune the four points where the H200's entries lost to the heuristic on the H100 (s36), which
# writes H100 entries; then the shipped table vs the tuned one on those points, fusedmoe bench, two processes each.
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s37_c4.sh "$OUT/script.sh"
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/tuned_before.json"
cp src/fusedmoe/configs/triton_moe_tuned.json "$OUT/triton_moe_tuned.json"
TUNE_OUT=$OUT/triton_moe_tuned.json TUNE_MAX_CANDIDATES=8 timeout 330 bash benchmarks/device_run.sh \
  "tune:deepseek-v3:bf16:110:2048,8192" "tune:mixtral-8x7b:bf16,fp8_tensor:90:8,512" > $OUT/tune_tail.txt 2>&1
el "tune rc=$?"; grep -iE "entries|wrote|merged|speedup|x " $OUT/tune_tail.txt | tail -12 | cut -c1-200
for r in 1 2; do for tb in before tuned; do
  f=$OUT/tuned_before.json; [ $tb = tuned ] && f=$OUT/triton_moe_tuned.json
  left=$(( 560 - ($(date +%s)-T0) )); [ $left -lt 30 ] && break 2
  for pt in "deepseek-v3 bf16 2048,8192" "mixtral-8x7b bf16,fp8_tensor 8,512"; do set -- $pt
    timeout $left python3 -m fusedmoe bench --preset $1 --weight-format $2 --tokens $3 --peers triton \
      --tuned-configs $f --quick-ceilings --no-plot --no-check --no-progress --out $OUT/b_${tb}_${r}_$1 \
      >> $OUT/bench_${tb}_$r.txt 2>&1
  done
  el "bench $tb $r rc=$?"
done; done
grep -h "us" $OUT/bench_*_1.txt | head -40 | cut -c1-160

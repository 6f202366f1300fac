#!/usr/bin/env bash
# s27 call 4: MX weight scales read in 4-byte runs (triton_moe._scale_run): GPU tests, in-process A/B, FP4 bench A/B
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call4.sh "$OUT/script.sh"
timeout 240 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 200 tests/test_triton_fp4.py \
   -k "scale_runs or padded_scale_rows or mx_fold or fast_conversions" 2>&1 | tee "$OUT/gpu_tests.txt" | tail -6
timeout 150 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,gpt-oss-20b,nemotron-nano --weight-format mxfp4 \
   --tokens 1,8,64 --settings default,noscalerun --rounds 3 2>&1 | tee "$OUT/decode_ab.txt" | tail -12
B="--preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4 --tokens 1,8,64 --peers triton
   --quick-ceilings --no-progress --no-plot --budget-s 60"
for r in 1 2; do
  FUSEDMOE_SCALE_RUN=0 timeout 90 python3 -m fusedmoe bench $B --out "$OUT/off$r" > "$OUT/off$r.log" 2>&1
  FUSEDMOE_SCALE_RUN=1 timeout 90 python3 -m fusedmoe bench $B --out "$OUT/on$r" > "$OUT/on$r.log" 2>&1
done
python3 benchmarks/results/h200-2026-12-04-s25/cmp.py "$OUT" off1,off2 on1,on2 steps runs | tee "$OUT/bench_ab.txt"
(cd "$OUT" && tar czf bench.tgz off? on? off?.log on?.log && rm -rf off? on? off?.log on?.log)

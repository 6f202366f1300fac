#!/usr/bin/env bash
# s28 call 2: MX scale runs of 8 / 16 bytes for 64-row decode tiles (triton_moe._scale_run): GPU tests, in-process
# A/B against the 4-byte rule (srun4), two-step runs only (srunr2) and no runs; FP4 bench old rule vs new
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call2.sh "$OUT/script.sh"
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 180 tests/test_triton_fp4.py \
   -k "scale_run" 2>&1 | tee "$OUT/gpu_tests.txt" | tail -4
timeout 230 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,gpt-oss-20b,nemotron-super,nemotron-nano \
   --weight-format mxfp4 --tokens 1,8,64 --settings default,srun4,srunr2,noscalerun --rounds 3 2>&1 \
   | tee "$OUT/decode_ab.txt" | tail -16
B="--preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4 --tokens 1,8,64 --peers triton
   --quick-ceilings --no-progress --no-plot --budget-s 40"
FUSEDMOE_SCALE_RUN_MAX=4 timeout 75 python3 -m fusedmoe bench $B --out "$OUT/old1" > "$OUT/old1.log" 2>&1
FUSEDMOE_SCALE_RUN_MAX=16 timeout 75 python3 -m fusedmoe bench $B --out "$OUT/new1" > "$OUT/new1.log" 2>&1
python3 benchmarks/results/h200-2026-12-04-s25/cmp.py "$OUT" old1 new1 run4 run16 | tee "$OUT/bench_ab.txt"
(cd "$OUT" && tar czf bench.tgz old1 new1 old1.log new1.log && rm -rf old1 new1 old1.log new1.log)

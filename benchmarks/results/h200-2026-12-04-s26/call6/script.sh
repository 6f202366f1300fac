# call 6 (twenty-sixth session): Llama-4-Scout's FP4 decode entries re-tuned on the swizzled words, then a bench A/B
# of the shipped table against the tuned one (merge: benchmarks/results/h200-2026-12-03-s24/merge_tune.py)
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 200 python3 -m fusedmoe tune --preset llama4-scout --weight-format nvfp4,mxfp4 --tokens 1,8,64 --out $OUT/tuned.json \
    --report $OUT/tune_report.json --budget-s 170 --max-candidates 8 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
B="--preset llama4-scout --weight-format nvfp4,mxfp4 --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 40"
timeout 70 python3 -m fusedmoe bench $B --out $OUT/old1 > $OUT/old1.log 2>&1; el "old rc=$?"
timeout 70 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new rc=$?"
python3 benchmarks/results/h200-2026-12-04-s25/cmp.py $OUT old1 new1 old new | tee $OUT/ab.txt
cd $OUT && tar czf r.tgz old1 new1 old1.log new1.log && rm -rf old1 new1 old1.log new1.log
tail -20 tune.txt

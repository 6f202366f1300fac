# call 7 (twenty-sixth session): Llama-4-Scout FP4 decode, the merged table (5 of 6 entries from call 6) against the
# table before (.calls/tuned_before.json), alternating, two runs each
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
B="--preset llama4-scout --weight-format nvfp4,mxfp4 --tokens 1,8,64 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 40"
for r in 1 2; do
  timeout 70 python3 -m fusedmoe bench $B --tuned-configs .calls/tuned_before.json --out $OUT/old$r > /dev/null 2>&1
  timeout 70 python3 -m fusedmoe bench $B --out $OUT/new$r > /dev/null 2>&1
done
python3 benchmarks/results/h200-2026-12-04-s25/cmp.py $OUT old1,old2 new1,new2 old new | tee $OUT/ab.txt
cd $OUT && tar czf r.tgz old? new? && rm -rf old? new?

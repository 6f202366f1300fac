#!/usr/bin/env bash
# s27 call 7: gpt-oss MXFP4 decode re-tuned with the scale runs, A/B of the new table against the shipped one
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
cp .calls/s27_call7.sh "$OUT/script.sh"
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 200 python3 -m fusedmoe tune --preset gpt-oss-120b,gpt-oss-20b --weight-format mxfp4 --tokens 1,8,64 \
  --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 170 --max-candidates 14 --no-progress > $OUT/tune.txt 2>&1
el "tune rc=$?"; tail -10 $OUT/tune.txt
B="--preset gpt-oss-120b,gpt-oss-20b --tokens 1,8,64 --weight-format mxfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 40"
for r in 1 2; do
  timeout 60 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new$r > $OUT/new$r.log 2>&1; el "new$r rc=$?"
  timeout 60 python3 -m fusedmoe bench $B --out $OUT/old$r > $OUT/old$r.log 2>&1; el "old$r rc=$?"
done
python3 benchmarks/results/h200-2026-12-04-s25/cmp.py $OUT old1,old2 new1,new2 old new > $OUT/ab.txt 2>&1
python3 benchmarks/results/h200-2026-12-03-s24/merge_tune.py $OUT/tune_report.json src/fusedmoe/configs/triton_moe_tuned.json $OUT old1,old2 new1,new2 > $OUT/merge.txt 2>&1
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/merged_table.json
cd $OUT && tar czf r.tgz new? old? *.log 2>/dev/null; rm -rf new? old? *.log
cat ab.txt merge.txt | tail -30

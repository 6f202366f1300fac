set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 330 python3 -m fusedmoe tune --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 --tokens 4096 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 300 --max-candidates 30 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -12 $OUT/tune.txt
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 4096 --weight-format mxfp4,nvfp4 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 60"
timeout 90 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new1 > $OUT/new1.log 2>&1; el "new1 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --out $OUT/old1 > $OUT/old1.log 2>&1; el "old1 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --tuned-configs $OUT/tuned.json --out $OUT/new2 > $OUT/new2.log 2>&1; el "new2 rc=$?"
timeout 90 python3 -m fusedmoe bench $B --out $OUT/old2 > $OUT/old2.log 2>&1; el "old2 rc=$?"
python3 .calls/s23_cmp.py $OUT old1,old2 new1,new2 > $OUT/ab.txt 2>&1
timeout 120 python3 .calls/mx8_graph.py > $OUT/mx8_swz.txt 2>&1; el "mx8 swz rc=$?"
FUSEDMOE_FP4_LAYOUT=tiled timeout 120 python3 .calls/mx8_graph.py > $OUT/mx8_tiled.txt 2>&1; el "mx8 tiled rc=$?"
cd $OUT && tar czf r.tgz new1 old1 new2 old2 *.log tune.txt && rm -rf new1 old1 new2 old2 *.log
cat ab.txt mx8_swz.txt mx8_tiled.txt

set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 90"
run() { n=$1; e=$2; shift 2; env $e timeout 120 python3 -m fusedmoe bench $B "$@" --out $OUT/$n > $OUT/$n.log 2>&1; el "$n rc=$?"; }
run swz1 FUSEDMOE_FP4_LAYOUT=swizzled --weight-format mxfp4,nvfp4
run til1 FUSEDMOE_FP4_LAYOUT=tiled --weight-format mxfp4,nvfp4
run swz2 FUSEDMOE_FP4_LAYOUT=swizzled --weight-format mxfp4,nvfp4
run til2 FUSEDMOE_FP4_LAYOUT=tiled --weight-format mxfp4,nvfp4
true
python3 .calls/s23_cmp.py $OUT swz1,swz2 til1,til2 > $OUT/ab.txt 2>&1
for f in swz1 til1; do grep -iE "error|Traceback|check_failed" $OUT/$f.log | head -3; done
cd $OUT && tar czf r.tgz swz1 til1 swz2 til2 *.log && rm -rf swz1 til1 swz2 til2 *.log
cat ab.txt

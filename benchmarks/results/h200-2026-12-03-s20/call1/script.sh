set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --weight-format nvfp4,mxfp4 --peers triton --quick-ceilings --no-progress --no-plot"
timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/tiled > $OUT/tiled.log 2>&1; el "tiled rc=$?"
FUSEDMOE_FP4_LAYOUT=linear timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/linear > $OUT/linear.log 2>&1; el "linear rc=$?"
for v in linear tiled; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-150 | head -8; grep -iE "error|fail|Traceback" $OUT/$v.log | head -3; done
timeout 200 python3 benchmarks/fp4_stream_probe.py --ladder > $OUT/ladder.txt 2>&1; el "ladder rc=$?"
tail -66 $OUT/ladder.txt | awk 'NR<=1 || /ladder|mode/ || 1' | cut -c1-80
cd $OUT && tar czf r.tgz tiled linear && rm -rf tiled linear

set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --weight-format nvfp4,mxfp4 --peers triton --quick-ceilings --no-progress --no-plot"
timeout 170 python3 -m fusedmoe bench $B --budget-s 140 --out $OUT/tiled > $OUT/tiled.log 2>&1; el "tiled rc=$?"
FUSEDMOE_FP4_LAYOUT=linear timeout 170 python3 -m fusedmoe bench $B --budget-s 140 --out $OUT/linear > $OUT/linear.log 2>&1; el "linear rc=$?"
for v in linear tiled; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-200 | head -8; grep -iE "error|fail" $OUT/$v.log | head -3; done
timeout 60 python3 benchmarks/kernel_breakdown.py --preset nemotron-super,deepseek-v3,gpt-oss-120b --weight-format nvfp4 --tokens 1,8,64 --calls 20 > $OUT/kb.txt 2>&1; el "kb rc=$?"
grep -E "floor|_align|_gemm" $OUT/kb.txt | cut -c1-120
timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 250 tests > $OUT/gpu_suite.txt 2>&1; el "suite rc=$?"
tail -15 $OUT/gpu_suite.txt
cd $OUT && tar czf r.tgz tiled linear && rm -rf tiled linear

set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --weight-format nvfp4,mxfp4 --peers triton --quick-ceilings --no-progress --no-plot"
timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/words > $OUT/words.log 2>&1; el "words rc=$?"
FUSEDMOE_SCALE_WORDS=0 timeout 150 python3 -m fusedmoe bench $B --budget-s 120 --out $OUT/bytes > $OUT/bytes.log 2>&1; el "bytes rc=$?"
timeout 240 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 200 tests/test_triton_fp4.py tests/test_triton_moe.py > $OUT/gpu_fp4.txt 2>&1; el "gpu tests rc=$?"
tail -6 $OUT/gpu_fp4.txt
for v in bytes words; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-150 | head -24; grep -iE "error|fail|Traceback" $OUT/$v.log | head -3; done
cd $OUT && tar czf r.tgz words bytes && rm -rf words bytes

set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
B="--preset nemotron-super,nemotron-nano,gpt-oss-120b --tokens 1,8,64,4096 --peers triton --quick-ceilings --no-progress --no-plot --budget-s 60"
run() { n=$1; shift; env "$@" timeout 100 python3 -m fusedmoe bench $B --weight-format mxfp4 --out $OUT/$n > $OUT/$n.log 2>&1; el "$n rc=$?"; }
run words1 FUSEDMOE_SCALE_WORDS=1
run bytes1 FUSEDMOE_SCALE_WORDS=0
run pad1 FUSEDMOE_SCALE_WORDS=pad
run words2 FUSEDMOE_SCALE_WORDS=1
run bytes2 FUSEDMOE_SCALE_WORDS=0
run pad2 FUSEDMOE_SCALE_WORDS=pad
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 190 tests/test_triton_fp4.py > $OUT/gpu_fp4.txt 2>&1; el "gpu tests rc=$?"
tail -4 $OUT/gpu_fp4.txt
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/tuned.json
timeout 150 python3 -m fusedmoe tune --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano --weight-format fp8_tensor,fp8_channel --tokens 1,8 --out $OUT/tuned.json --report $OUT/tune_report.json --budget-s 110 --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -25 $OUT/tune.txt
for v in bytes1 pad1 words1 bytes2 pad2 words2; do echo "== $v"; grep -E "^\| (nemotron|gpt)" $OUT/$v/bench.md | cut -c1-120 | head -8; grep -iE "error|fail|Traceback" $OUT/$v.log | head -3; done
cd $OUT && tar czf r.tgz words1 bytes1 pad1 words2 bytes2 pad2 && rm -rf words1 bytes1 pad1 words2 bytes2 pad2

set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo "[$(( $(date +%s)-T0 ))s] $*"; }
timeout 250 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 240 tests > $OUT/gpu_suite.txt 2>&1; el "suite rc=$?"
tail -6 $OUT/gpu_suite.txt
timeout 140 python3 -m fusedmoe tune --preset gpt-oss-120b,nemotron-super --weight-format mxfp4,nvfp4 --tokens 64 --budget-s 95 --out $OUT/tuned.json --report $OUT/tune_report.json --no-progress > $OUT/tune.txt 2>&1; el "tune rc=$?"
tail -25 $OUT/tune.txt | cut -c1-180

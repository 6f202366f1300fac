set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
timeout 340 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 250 tests > $OUT/gpu_suite.txt 2>&1
echo "gpu suite rc=$?"; tail -4 $OUT/gpu_suite.txt

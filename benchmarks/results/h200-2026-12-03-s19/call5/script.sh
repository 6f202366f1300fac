set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
timeout 175 python3 -m pytest -q -rfE --tb=short -m gpu -n 8 -p no:cacheprovider --timeout 170 tests/test_triton_fp4.py tests/test_triton_moe.py -k "not 4096" > $OUT/gpu_fp4.txt 2>&1; echo "rc=$?"
tail -6 $OUT/gpu_fp4.txt

#!/usr/bin/env bash
# s62 call 3 (warm H200): the FP4 kernel GPU tests again with a longer limit (call 1's 170 s cut them on the cold
# machine), then the 16-bit / FP8 kernel file's GPU tests (the rings' unsigned positions reach those kernels).
export PYTHONPATH=$PWD/src; timeout 330 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 300 tests/test_ws_fp4.py tests/test_ws_fp4_dec.py > $OUT/tests_fp4.txt 2>&1; echo "fp4 rc=$?"; tail -3 $OUT/tests_fp4.txt; timeout 250 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 240 tests/test_triton_moe.py > $OUT/tests_core.txt 2>&1; echo "core rc=$?"; tail -3 $OUT/tests_core.txt

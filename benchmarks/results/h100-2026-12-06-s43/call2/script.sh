#!/usr/bin/env bash
# s43 call 2: the FP4 prefill GPU tests again, verbose (call 1 timed out compiling)
export PYTHONPATH=$PWD/src; timeout 280 python3 -m pytest -v -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 90 tests/test_ws_fp4.py > $OUT/t.txt 2>&1

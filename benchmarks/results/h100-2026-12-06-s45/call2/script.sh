#!/usr/bin/env bash
# s45 call 2 (warm, after call 1's tests ran out of their 200 s compiling): the DYN same-bits test, then the rest
export PYTHONPATH=$PWD/src; mkdir -p $OUT
timeout 280 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 200 tests/test_ws_gemm.py -k "dynamic" -x > $OUT/dyn_gpu.txt 2>&1
timeout 280 python3 -m pytest -q -rfE --tb=line -m gpu -n 4 -p no:cacheprovider --durations=15 --timeout 250 tests/test_ws_gemm.py -k "not dynamic" > $OUT/ws_gpu2.txt 2>&1

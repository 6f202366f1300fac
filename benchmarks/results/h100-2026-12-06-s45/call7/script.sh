#!/usr/bin/env bash
# s45 calls 7 and 8 (warm): the default path's GPU tests that ran out of memory beside call 6's harness compile
export PYTHONPATH=$PWD/src
timeout 165 python3 -m pytest -q -rfE --tb=line -m gpu -n 3 -p no:cacheprovider tests/test_triton_moe.py -k "deepseek or dsv3 or real or fused_combine or align_quant" > $OUT/moe_gpu2.txt 2>&1
timeout 110 python3 -m pytest -q -rfE --tb=line -m gpu -n 4 -p no:cacheprovider tests/test_triton_moe.py -k "FP8_BLOCK or qwen3_shapes" > $OUT/moe_gpu3.txt 2>&1

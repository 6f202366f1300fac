#!/usr/bin/env bash
# s39 call 1 (whatever device time is left): the default-on Triton FP8 block change's GPU tests, the REG_A A/B at
# 4096 FP4 tokens, the REG_A GPU tests, then the rest of the s37/s38 same-bits tests; each file written as it ends
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 140 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 4096 --settings default,ws4rega,ws4rega+ws4ch4 --rounds 2 > $OUT/ab_rega.txt 2>&1
echo "ab rc=$?"; tail -6 $OUT/ab_rega.txt
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_triton_moe.py \
  -k "fp8_block or BLOCK or block" > $OUT/s38_triton_block_tests.txt 2>&1; echo "blk rc=$?"; tail -5 $OUT/s38_triton_block_tests.txt
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_fp4.py \
  -k "reg_a" > $OUT/rega_tests.txt 2>&1; echo "rega rc=$?"; tail -8 $OUT/rega_tests.txt
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_gemm.py \
  -k "pipelined or one_part or block_scalar or block" > $OUT/s38_ws_tests.txt 2>&1; echo "ws rc=$?"; tail -8 $OUT/s38_ws_tests.txt

#!/usr/bin/env bash
# Planned in the sixty-second session: a third call (any GPU, ~400 s). set_ws_fp4_min_rows (built after the device
# time, opt-in): FP4 x BF16 calls whose config has small Triton tiles (block_m 32 / 64: gpt-oss-120b below 1536
# tokens, Nemotron below ~1500) run the FP4 prefill kernel's 128-token tiles from N rows an expert. Its GPU test,
# then the A/B at 256 / 512 / 1024 tokens (8-48 rows an expert). Make the smallest N that wins everywhere above it
# the default (WS_FP4 "min_rows"); remove the option if none wins.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 120 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 110 tests/test_ws_fp4.py \
  -k min_rows > $OUT/tests_min_rows.txt 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests_min_rows.txt
timeout 300 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 256,512,1024 --settings default,ws4from8,ws4from16,ws4from32 --rounds 3 \
  --budget-s 0.2 > $OUT/ab_min_rows.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab_min_rows.txt | tail -19 | cut -c1-160

#!/usr/bin/env bash
# Sixty-first session, call 1: the GPU tests of the FP4 prefill kernel's pair order (set_ws_fp4_pair_order, opt-in)
# and of two K steps a slot for 256-token tiles (set_ws_fp4_two_steps_256, opt-in), with the reference tests; then
# the A/B of both against the default at 2048 / 4096 tokens (3 FP4 models x MXFP4 / NVFP4).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/test_ws_fp4.py \
  -k "two_steps_256 or pair_order or matches_reference" > $OUT/tests.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/tests.txt
timeout 360 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 2048,4096 --settings default,ws4pairs,ws4bk256 --rounds 2 \
  --budget-s 0.12 > $OUT/ab.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab.txt | tail -13 | cut -c1-150

#!/usr/bin/env bash
# Sixtieth session: two 64-wide K steps a ring slot of the FP4 prefill kernel (set_ws_fp4_block_k(128), 128-token
# tiles): its GPU same-bits tests, then the A/B at 2048 / 4096 tokens against the default (256-token joined tiles)
# and 128-token tiles with one step a slot.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/test_ws_fp4.py \
  -k "two_steps or matches_reference" > $OUT/tests_ks.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/tests_ks.txt
timeout 330 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 2048,4096 --settings default,ws4bt128+ws4j128,ws4bt128+ws4j128+ws4bk128 --rounds 2 \
  --budget-s 0.12 > $OUT/ab_ks.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab_ks.txt | tail -30 | cut -c1-150

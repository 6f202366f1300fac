#!/usr/bin/env bash
# Sixty-first session, call 2: the pair order's A/B at 8192 and again 2048 tokens; every FP4 prefill GPU test with
# the pair order forced on.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 290 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 8192,2048 --settings default,ws4pairs --rounds 2 \
  --budget-s 0.12 > $OUT/ab2.txt 2>&1; echo "ab rc=$?"
grep -vE "^\s*$" $OUT/ab2.txt | tail -13 | cut -c1-150
FUSEDMOE_WS_FP4_PAIRS=1 timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider \
  --timeout 180 tests/test_ws_fp4.py > $OUT/tests_pairs.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests_pairs.txt

#!/usr/bin/env bash
# Sixty-first session, call 6: FP4 prefill GPU tests under the new defaults (the pair order for non-gated layers; the
# 256-token two-steps path removed).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 140 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 120 tests/test_ws_fp4.py \
  -k "pair_order or matches_reference or two_steps or padded_handoff or chunks" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -6 $OUT/tests.txt

#!/usr/bin/env bash
# Planned in the sixty-first session: the next session's first call (any GPU, ~400 s). The GPU tests under the
# sixty-first session's defaults -- the FP4 prefill kernel's pair order for non-gated layers (set_ws_fp4_pair_order
# "auto"), the 256-token two-steps path removed -- which its last start did not get to run: every FP4 prefill test,
# the FP4 decode kernel's, and the kernel files' (tests-core).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 160 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_fp4.py \
  tests/test_ws_fp4_dec.py > $OUT/tests_fp4.txt 2>&1; echo "fp4 tests rc=$?"; tail -3 $OUT/tests_fp4.txt
timeout 400 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 240 \
  tests/test_triton_moe.py tests/test_triton_fp4.py > $OUT/tests_core.txt 2>&1; echo "core tests rc=$?"
tail -3 $OUT/tests_core.txt

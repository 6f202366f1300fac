#!/usr/bin/env bash
# Planned in the sixtieth session: the next session's first call (~350-450 s; any GPU). Two K steps a ring slot for
# the FP4 prefill kernel's 256-token tiles (set_ws_fp4_two_steps_256, opt-in, compiled only: single-buffered
# converted tiles, 2 stages): its GPU same-bits tests, then the A/B at 2048 / 4096 / 8192 tokens against the default
# (one step a slot). If it wins everywhere, it becomes the default (_WS_FP4["two_steps_256"], the switch test's default,
# docs/kernels.md's table); if it loses, remove it as the sixtieth session's note says.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/test_ws_fp4.py \
  -k "two_steps" > $OUT/tests_sb.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/tests_sb.txt
timeout 380 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 4096,2048,8192 --settings default,ws4bk256 --rounds 2 --budget-s 0.12 \
  > $OUT/ab_sb.txt 2>&1; echo "ab rc=$?"
grep -E "^(gpt|nemo|preset)" $OUT/ab_sb.txt | cut -c1-130

#!/usr/bin/env bash
# s58 call 5: the FP4 prefill kernel's row copies (set_ws_fp4_x_gather): GPU tests, then the in-process A/B at prefill.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 210 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_ws_fp4.py \
  -k "x_gather or matches_reference or gpt_oss_shape or nemotron or padded_handoff" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -4 $OUT/tests.txt
timeout 230 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 4096,8192,2048 --settings default,ws4xg --rounds 2 --budget-s 0.25 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"
grep -v -i warn $OUT/ab.txt | cut -c1-150 | tail -45

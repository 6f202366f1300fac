#!/usr/bin/env bash
# s41 call 6: the FP4 prefill block scales a K step ahead (set_ws_fp4_scales_ahead) -- GPU same-bits tests, then A/B
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 75 python3 -m pytest -q -rfE --tb=short -m gpu -n 2 -p no:cacheprovider --timeout 70 tests/test_ws_fp4.py \
  -k "scales_ahead" > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/ws_fp4_gpu.txt
timeout 130 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 4096 --settings default,ws4ahead --rounds 2 --budget-s 110 > $OUT/ab.txt 2>&1
echo "ab rc=$?"; tail -16 $OUT/ab.txt

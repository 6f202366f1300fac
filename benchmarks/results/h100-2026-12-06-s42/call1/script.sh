#!/usr/bin/env bash
# s42 call 1: joined chunks (set_ws_fp4_join) -- same-bits GPU tests, then A/B at 4096 / 8192 tokens
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 110 python3 -m pytest -q -rfE --tb=short -m gpu -n 2 -p no:cacheprovider --timeout 100 tests/test_ws_fp4.py \
  -k "chunks" > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; tail -4 $OUT/ws_fp4_gpu.txt
timeout 260 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 4096,8192 --settings default,ws4join,ws4skip --rounds 2 --budget-s 240 > $OUT/ab.txt 2>&1
echo "ab rc=$?"; tail -30 $OUT/ab.txt

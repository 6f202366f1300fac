#!/usr/bin/env bash
# s42 call 7: FP4 prefill block scales loaded after the fence (set_ws_fp4_scales_after_fence) -- same bits, then A/B
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 120 python3 -m pytest -q -rfE --tb=short -m gpu -n 2 -p no:cacheprovider --timeout 110 tests/test_ws_fp4.py \
  -k "scales_ahead" > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "passed|failed|FAIL|Error|\.\.\.\." $OUT/ws_fp4_gpu.txt | tail -4
timeout 175 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 4096 --settings default,ws4scfence --rounds 2 --budget-s 150 > $OUT/ab.txt 2>&1
echo "ab rc=$?"; tail -8 $OUT/ab.txt

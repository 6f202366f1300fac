#!/usr/bin/env bash
# s43 call 1: all FP4 prefill GPU tests (the s42 opt-ins' bits, never run), then the opt-ins' A/B at 4096 tokens
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
timeout 250 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_ws_fp4.py \
  > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "passed|failed|FAIL|Error" $OUT/ws_fp4_gpu.txt | tail -12
timeout 300 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 4096 --settings default,ws4trel,ws4direct,ws4direct4,ws4k2+ws4direct4 --rounds 2 > $OUT/ab.txt 2>&1
echo "ab rc=$?"; tail -30 $OUT/ab.txt

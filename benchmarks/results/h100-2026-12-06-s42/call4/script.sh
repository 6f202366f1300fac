#!/usr/bin/env bash
# s42 call 4: joined chunks as the default (256-token tiles from 64 rows an expert) -- the FP4 prefill GPU tests,
# then the FP4 prefill bench (issue 4's % of the BF16 peak) at 2048 / 4096 / 8192 tokens
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
timeout 250 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 200 tests/test_ws_fp4.py \
  > $OUT/ws_fp4_gpu.txt 2>&1; echo "tests rc=$?"; grep -E "passed|failed|FAIL|Error" $OUT/ws_fp4_gpu.txt | tail -6
timeout 230 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 2048,4096,8192 --peers triton --quick-ceilings --no-plot --no-progress --budget-s 200 --out $OUT/pf \
  > $OUT/pf.txt 2>&1; echo "bench rc=$?"; tail -24 $OUT/pf.txt
cd $OUT && tar czf pf.tgz pf && rm -rf pf

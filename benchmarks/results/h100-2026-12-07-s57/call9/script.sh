#!/usr/bin/env bash
# s57 call 9: issue 4's decode points through `fusedmoe bench` with the new H100 FP4 entries (1-64 tokens), then the
# kernel GPU tests (tests-core) on the tree without the on-load quantization
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
timeout 200 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1,8,32,64 --peers triton --quick-ceilings --no-plot --no-progress --budget-s 150 --out $OUT/bench \
  > $OUT/bench_fp4.txt 2>&1; echo "bench rc=$?"
tail -40 $OUT/bench_fp4.txt | cut -c1-160
TESTS_TIMEOUT_S=250 bash benchmarks/device_run.sh tests-core > $OUT/tests_core.txt 2>&1; echo "tests rc=$?"
tail -5 $OUT/tests_core.txt

#!/usr/bin/env bash
# s43 call 6: Nsight Compute on one-token FP4 decode layer calls (BENCH_COMMANDS plan item 1's first step)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; cat $OUT/env.txt
NCU_TIMEOUT_S=150 NCU_POINTS="gpt-oss-120b:mxfp4:1 nemotron-nano:nvfp4:1" NCU_KERNELS="_ws _gemm _align _combine" \
  bash benchmarks/device_run.sh ncu > $OUT/ncu_run.txt 2>&1; echo "ncu rc=$?"; tail -3 $OUT/ncu_run.txt
mkdir -p /tmp/n && tar xzf $OUT/ncu.tgz -C /tmp/n && for f in /tmp/n/ncu/*summary.txt; do echo "== $f"; grep -A1 "^\[" $f | cut -c1-400; done

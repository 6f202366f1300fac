#!/usr/bin/env bash
# Planned in the fifty-first session, not run (the device budget ran out on failed machine starts): the next session's
# first call. On an H200: issue 3's full harness (none on an H200 for thirteen sessions). On an H100: Nsight Compute of
# DeepSeek-V3 BF16 at 8192 tokens with 16-bit weights' padding-half skip off / on -- is its loss extra DRAM reads of
# weights (an expert's half-skipped tail tile running ahead along K of its full blocks, docs/kernels.md)? Compare the
# `_ws_gemm_kernel` rows' DRAM throughput x duration and L2 hit rate in ncu_skip0.tgz / ncu_skip1.tgz.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  for s in 0 1; do
    FUSEDMOE_WS_SKIP16=$s NCU_POINTS="deepseek-v3:bf16:8192" NCU_KERNELS="_ws" NCU_TAG="skip$s" NCU_TIMEOUT_S=150 \
      bash benchmarks/device_run.sh ncu 2>&1 | grep -E "ncu |rc=|profiled"
  done
  ls -la $OUT
fi

#!/usr/bin/env bash
# Planned in the fifty-second session: the next session's first call (carry .peers). On an H200: issue 3's full
# harness (none on an H200 for fourteen sessions), then issue 4's one-token FP4 breakdown with GEMM2's early weights
# (the default since s52). On an H100: that breakdown, the FP4 decode GPU tests, and Nsight of the one-token decode
# GEMMs with the early weights (are GEMM2's SMs still idle a quarter of its time?) and of DeepSeek-V3 BF16 8192 with
# the 16-bit skip off / on (its loss is still not understood: do the weights get read twice?).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
fi
timeout 90 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 1 --calls 20 --bw 3.1 > $OUT/kb_fp4_t1.txt 2>&1; echo "kb rc=$?"
grep -E "T=1 " $OUT/kb_fp4_t1.txt
if [[ "$name" != *H200* ]]; then
  timeout 170 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 160 tests/test_ws_fp4_dec.py \
    > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -3 $OUT/t_fp4_dec.txt
  NCU_POINTS="gpt-oss-120b:mxfp4:1 nemotron-nano:nvfp4:1" NCU_KERNELS="_ws" NCU_TAG="dec_earlyw" NCU_TIMEOUT_S=110 \
    bash benchmarks/device_run.sh ncu 2>&1 | grep -E "ncu |rc=|profiled"
  for s in 0 1; do
    FUSEDMOE_WS_SKIP16=$s NCU_POINTS="deepseek-v3:bf16:8192" NCU_KERNELS="_ws" NCU_TAG="skip$s" NCU_TIMEOUT_S=110 \
      bash benchmarks/device_run.sh ncu 2>&1 | grep -E "ncu |rc=|profiled"
  done
fi

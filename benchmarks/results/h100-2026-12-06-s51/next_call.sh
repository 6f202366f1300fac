#!/usr/bin/env bash
# Planned in the fifty-first session, not run (the device budget ran out on failed machine starts): the next session's
# first call. On an H200: issue 3's full harness (none on an H200 for thirteen sessions). On an H100:
# (1) the GPU tests of 16-bit paired halves (set_ws_pair_padding_half_16bit, built in s51, compiled for sm_90 only):
#     the same bits as both warpgroups, in the skip test's 16-bit cases;
# (2) their A/B at the BF16 shapes with many experts (the plain skip lost there: DeepSeek-V3 8192 0.761x static,
#     0.930x with counted tiles);
# (3) Nsight Compute of DeepSeek-V3 BF16 8192 with the plain skip off / on -- is its loss extra DRAM reads of weights
#     (a half-skipped tail tile running ahead along K of its expert's full blocks, docs/kernels.md)? Compare the
#     `_ws_gemm_kernel` rows' DRAM throughput x duration and L2 hit rate in ncu_skip0.tgz / ncu_skip1.tgz.
# If (1) passes and (2) wins: harness PEERS=sglang,fusedmoe,fusedmoe-pair16 at the BF16 2048 / 8192 points
# (PLAN_ARGS="--models dsv3 dsv3_tp8 qwen3_30b_a3b minimax_m2.5 nemotron --dtypes bf16 --tokens 2048 8192"), then make
# pairing the 16-bit default (triton_moe._WS_SKIP_HALF["16bit_pair"]).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 140 tests/test_ws_gemm.py \
    -k "skip_padding and BF16" > $OUT/t_pair.txt 2>&1; echo "t_pair rc=$?"; tail -3 $OUT/t_pair.txt
  timeout 200 python3 -u benchmarks/decode_ab.py --preset deepseek-v3,deepseek-v3-tp8,qwen3-30b-a3b,minimax-m2 \
    --weight-format bf16 --tokens 2048,8192 --settings default,ws16pair,ws16skip --rounds 2 > $OUT/ab_pair.txt 2>&1
  echo "ab rc=$?"; tail -9 $OUT/ab_pair.txt
  for s in 0 1; do
    FUSEDMOE_WS_SKIP16=$s NCU_POINTS="deepseek-v3:bf16:8192" NCU_KERNELS="_ws" NCU_TAG="skip$s" NCU_TIMEOUT_S=110 \
      bash benchmarks/device_run.sh ncu 2>&1 | grep -E "ncu |rc=|profiled"
  done
fi

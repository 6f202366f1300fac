#!/usr/bin/env bash
# Planned in the fifty-ninth session: the next session's first call (carry .peers; ~330-560 s). The FP4 prefill
# defaults changed (NVFP4's block scales through the ring, a gated tile's halves by one store: both same bits, their
# FP4 prefill GPU tests passed on the H100 -- 14 + 36). On an H100: the kernel GPU tests (tests-core: test_triton_moe
# + test_triton_fp4, whose FP4 prefill cases now run the new defaults). On an H200: issue 3's harness at the FP8
# prefill points of the fifty-fourth session's H200 entries (the 0.89x DeepSeek-V3 FP8 per channel 8192 point, planned
# since the fifty-sixth session), then the FP4 prefill standing on the H200 (issue 4 asks for H200 numbers).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  export PEERS=sglang,fusedmoe BUDGET_S=90
  export POINTS="--models dsv3,dsv3_tp8,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 150 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "^fp8" $OUT/ratio.txt
  (cd $OUT && tar czf h.tgz h && rm -rf h)
  timeout 150 python3 -m fusedmoe bench --preset gpt-oss-120b,nemotron-super,nemotron-nano \
    --weight-format mxfp4,nvfp4 --tokens 2048,4096,8192 --peers triton --quick-ceilings --out $OUT/bench_fp4 \
    > $OUT/bench_fp4.txt 2>&1; echo "bench rc=$?"
  grep -E "│ (gpt|nemo)|ceilings" $OUT/bench_fp4.txt | cut -c1-130
else
  TESTS_TIMEOUT_S=330 bash benchmarks/device_run.sh tests-core > $OUT/tests_core.txt 2>&1; echo "tests rc=$?"
  tail -5 $OUT/tests_core.txt
fi

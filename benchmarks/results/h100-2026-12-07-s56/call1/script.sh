#!/usr/bin/env bash
# Planned in the fifty-fifth session: the next session's first call (carry .peers). On an H200: the fifty-fourth
# session's planned first call (the layer under the H100 table's entries against the H200 table -- decode_ab's
# tabh100 -- at the FP8 prefill points and at 1 / 8 tokens, then issue 3's harness at the points whose H200 entries
# changed in the fifty-fourth session). On an H100: the GPU tests outside the kernel files (tests-rest: not run since
# the fifty-fourth session's align-zeroed amax; the kernel files passed in the fifty-fifth, 205 tests before the
# limit), then the layer at the BF16 ReLU^2 points that got H100 entries in the fifty-fifth session (harness subset).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h200-2026-12-07-s54/next_call.sh
else
  TESTS_REST_TIMEOUT_S=330 bash benchmarks/device_run.sh tests-rest 2>&1 | tail -12
  P="--models qwen3_30b_a3b,dsv3_tp8,minimax_m2.5,mixtral --dtypes bf16 --tokens 1,8,512"
  export PEERS=sglang,fusedmoe BUDGET_S=70 PLAN_ARGS="${P//,/ }" PRECOMPILE_ARGS="$P"  # the harness: spaces
  OUT=$OUT/h timeout 90 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 100 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "relu2" $OUT/ratio.txt
  (cd $OUT && tar czf h.tgz h && rm -rf h)
fi

#!/usr/bin/env bash
# Planned in the fifty-fourth session: the next session's first call (carry .peers). On an H200: the layer under the
# H100 table's entries against the H200 table (decode_ab's tabh100; the H200 table lags by fifteen sessions of
# entries) at the FP8 prefill points and at 1 / 8 tokens, then issue 3's harness at the points whose H200 entries
# changed in the fifty-fourth session (the wide pipelined GEMM1). On an H100: the H100 table's one-token FP4 decode
# entries (8 stages) against 4 stages (decode_ab's ws4st4 changes only the switch's configs, so a re-tune instead).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  timeout 200 python3 benchmarks/decode_ab.py --preset deepseek-v3,minimax-m2,qwen3-30b-a3b,nemotron-nano,mixtral-8x7b \
    --weight-format fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192 --settings default,tabh100 --rounds 2 \
    --budget-s 0.2 > $OUT/ab_tabh100.txt 2>&1; echo "ab rc=$?"; cut -c1-120 $OUT/ab_tabh100.txt
  timeout 120 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano,minimax-m2 \
    --weight-format bf16,fp8_tensor,fp8_channel --tokens 1,8 --settings default,tabh100 --rounds 2 --budget-s 0.2 \
    > $OUT/ab_tabh100_dec.txt 2>&1; echo "abd rc=$?"; cut -c1-120 $OUT/ab_tabh100_dec.txt
  # the harness takes space-separated lists, precompile_harness.py comma-separated ones (fixed in the fifty-fifth
  # session: one comma string for both made the harness refuse its arguments)
  P="--models dsv3,dsv3_tp8,minimax_m2.5 --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
  export PEERS=sglang,fusedmoe BUDGET_S=90 PLAN_ARGS="${P//,/ }" PRECOMPILE_ARGS="$P"
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh prep > $OUT/h_prep.txt 2>&1; echo "prep rc=$?"
  OUT=$OUT/h timeout 110 bash benchmarks/harness_run.sh measure > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
  python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1; grep -E "^fp8" $OUT/ratio.txt
  (cd $OUT && tar czf h.tgz h && rm -rf h)
else
  timeout 300 python3 -m fusedmoe tune --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 --tokens 1 \
    --max-candidates 8 --out $OUT/tune_fp4_t1.json > $OUT/tune_fp4_t1.txt 2>&1; echo "tune rc=$?"; tail -12 $OUT/tune_fp4_t1.txt
fi

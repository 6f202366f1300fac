#!/usr/bin/env bash
# s52 call 1: the FP4 decode kernel's stream-K and GEMM2 early weights (set_ws_fp4_decode_stream_k /
# set_ws_fp4_decode_early_weights, opt-in, built this session): GPU tests and A/B; then on an H200 the full harness,
# on an H100 s51's paired-halves tests and A/B
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
K="stream"; TOK=1
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 140 tests/test_ws_fp4_dec.py \
  -k "$K" > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -4 $OUT/t_fp4_dec.txt
timeout 120 python3 -u benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-nano,nemotron-super \
  --weight-format mxfp4,nvfp4 --tokens $TOK --settings default,ws4stream,ws4earlyw,ws4earlypf,ws4stream+ws4earlyw+ws4earlypf \
  --rounds 2 --budget-s 0.3 > $OUT/ab_stream.txt 2>&1; echo "ab_stream rc=$?"; tail -9 $OUT/ab_stream.txt
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  timeout 130 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 120 tests/test_ws_gemm.py \
    -k "skip_padding" > $OUT/t_pair.txt 2>&1; echo "t_pair rc=$?"; tail -3 $OUT/t_pair.txt
  timeout 120 python3 -u benchmarks/decode_ab.py --preset deepseek-v3,deepseek-v3-tp8,qwen3-30b-a3b \
    --weight-format bf16 --tokens 8192 --settings default,ws16pair,ws16skip --rounds 1 > $OUT/ab_pair.txt 2>&1
  echo "ab rc=$?"; tail -9 $OUT/ab_pair.txt
fi

#!/usr/bin/env bash
# Planned in the fifty-second session: the next session's first call (carry .peers). (1) The GPU tests of the FP4
# decode kernel's stream-K, GEMM2's early weights and GEMM1's early prefetch (opt-in, built in s52, compiled for sm_90
# only) and of the whole decode kernel; (2) their A/B at one token (gpt-oss-120b, Nemotron-3-Nano / Super, MXFP4 /
# NVFP4) -- each that wins on every point becomes the default (triton_moe._WS_FP4_DEC "stream" / "early_w" /
# "early_pf"); then on an H200 issue 3's full harness (none
# for fourteen sessions), on an H100 s51's paired-halves GPU tests and A/B (set_ws_pair_padding_half_16bit).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 170 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 160 tests/test_ws_fp4_dec.py \
  > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -4 $OUT/t_fp4_dec.txt
timeout 150 python3 -u benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-nano,nemotron-super \
  --weight-format mxfp4,nvfp4 --tokens 1 --settings default,ws4stream,ws4earlyw,ws4earlypf,ws4stream+ws4earlyw+ws4earlypf \
  --rounds 3 --budget-s 0.3 > $OUT/ab_stream.txt 2>&1; echo "ab_stream rc=$?"; tail -9 $OUT/ab_stream.txt
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
else
  timeout 130 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 120 tests/test_ws_gemm.py \
    -k "skip_padding" > $OUT/t_pair.txt 2>&1; echo "t_pair rc=$?"; tail -3 $OUT/t_pair.txt
  timeout 200 python3 -u benchmarks/decode_ab.py --preset deepseek-v3,deepseek-v3-tp8,qwen3-30b-a3b,minimax-m2 \
    --weight-format bf16 --tokens 2048,8192 --settings default,ws16pair,ws16skip --rounds 2 > $OUT/ab_pair.txt 2>&1
  echo "ab rc=$?"; tail -9 $OUT/ab_pair.txt
fi

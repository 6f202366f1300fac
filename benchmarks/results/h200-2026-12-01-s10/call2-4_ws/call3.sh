#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
one() { timeout ${TO:-40} python3 .s10/ws_one.py "$@" >> $R/ws.jsonl 2>> $R/ws.err || echo "{\"args\": \"$*\", \"rc\": $?}" >> $R/ws.jsonl; }
# quick hang triage on a mid shape
TO=30 one qwen3_30b_a3b 8192 gemm2 2d 128 128 8 4 0
TO=30 one qwen3_30b_a3b 8192 gemm2 2d 128 128 4 4 1
TO=30 one qwen3_30b_a3b 8192 gemm2 3d 128 128 4 4 1
TO=30 one qwen3_30b_a3b 8192 gemm2 2d 128 128 4 3 1
cat $R/ws.jsonl
if grep -q '"WS": true' $R/ws.jsonl; then
  for s in dsv3 nemotron mixtral dsv3_tp8 minimax_m2.5; do for g in gemm1 gemm2; do
    one $s 8192 $g 2d 128 128 8 4 0; one $s 8192 $g 2d 128 128 4 4 1; one $s 8192 $g 2d 128 256 4 3 1
  done; done
  one qwen3_30b_a3b 8192 gemm1 2d 128 128 8 4 0; one qwen3_30b_a3b 8192 gemm1 2d 128 128 4 4 1
  one dsv3 2048 gemm1 2d 128 128 8 4 0; one dsv3 2048 gemm1 2d 128 128 4 4 1
fi
tail -c 3000 $R/ws.err
cat $R/ws.jsonl | cut -c1-220

#!/usr/bin/env bash
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
one() { timeout 25 python3 .s10/gluon/gl_one.py "$@" >> $R/gl.jsonl 2>> $R/gl.err || echo "{\"args\": \"$*\", \"rc\": $?}" >> $R/gl.jsonl; }
one qwen3_30b_a3b 8192 gemm2 gluon 4
one qwen3_30b_a3b 8192 gemm2 triton 4
if grep -q '"which": "gluon"' $R/gl.jsonl; then
  one dsv3 8192 gemm1 gluon 4; one dsv3 8192 gemm1 triton 4
  one nemotron 8192 gemm1 gluon 4; one nemotron 8192 gemm1 triton 4
  one qwen3_30b_a3b 8192 gemm2 gluon 3
fi
tail -c 1500 $R/gl.err
cat $R/gl.jsonl

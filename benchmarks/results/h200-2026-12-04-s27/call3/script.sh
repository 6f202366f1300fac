#!/usr/bin/env bash
# s27 call 3: FP4 decode GEMM1 / GEMM2 config variants outside the tuner's candidate set (8 warps, 32-row halves,
# 128-wide K at split 2), per-kernel times by benchmarks/kernel_breakdown.py
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call3.sh "$OUT/script.sh"
V1=(--gemm1 '{"num_warps": 8}' --gemm1 '{"block_n": 32}' --gemm1 '{"block_n": 32, "split_k": 4}'
    --gemm1 '{"block_k": 128}' --gemm1 '{"num_warps": 8, "split_k": 4}' --gemm1 '{"num_stages": 3}'
    --gemm1 '{"block_n": 128, "num_warps": 8}'
    --gemm2 '{"num_warps": 8, "block_n": 128}' --gemm2 '{"block_k": 128}' --gemm2 '{"block_n": 32}'
    --gemm2 '{"num_warps": 8}')
for pt in gpt-oss-120b:mxfp4 nemotron-super:nvfp4 gpt-oss-120b:nvfp4; do
  IFS=: read -r p f <<< "$pt"
  timeout 200 python3 benchmarks/kernel_breakdown.py --preset $p --weight-format $f --tokens 1,8 --calls 30 "${V1[@]}" \
     --json "$OUT/kb_${p}_${f}.json" > "$OUT/kb_${p}_${f}.txt" 2>&1
  echo "$pt rc=$?"
  grep -E 'T=|_gemm1|_gemm2' "$OUT/kb_${p}_${f}.txt" | grep -v '^#' | head -80
done

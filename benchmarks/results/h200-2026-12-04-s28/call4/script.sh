#!/usr/bin/env bash
# s28 call 4: prototype -- warp-specialized Gluon MXFP4 x BF16 prefill GEMM (benchmarks/gluon_fp4_prefill.py):
# correctness against x @ dequantize(W).T and TF/s, next to our Triton layer's GEMM times at 4096 tokens
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call4.sh "$OUT/script.sh"
timeout 150 python3 benchmarks/gluon_fp4_prefill.py --experts 128 --rows 128 --n 2880 --k 2880 2>&1 | tee "$OUT/proto.txt" | tail -8
timeout 120 python3 benchmarks/gluon_fp4_prefill.py --experts 32 --rows 512 --n 2880 --k 2880 2>&1 | tee -a "$OUT/proto.txt" | tail -4
timeout 150 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b --weight-format mxfp4 --tokens 4096 --calls 5 2>&1 \
  | grep -v Warn | tee "$OUT/kb4096.txt" | grep -E "T=|_gemm"

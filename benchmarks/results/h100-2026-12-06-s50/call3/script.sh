#!/usr/bin/env bash
# s50 call 3 (the same warm H100 as call 2): DeepSeek-V3 BF16 8192 with GEMM2 on the Triton kernel, so that the
# warp-specialized kernel's time is GEMM1's alone, 16-bit skip off / on
export PYTHONPATH=$PWD/src; for s in 0 1; do FUSEDMOE_WS_SKIP16=$s timeout 120 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 --weight-format bf16 --tokens 8192 --calls 4 --bw 3.1 --gemm2 '{"warp_specialized": false, "num_warps": 8, "num_stages": 3}' > $OUT/kb_g2t_skip$s.txt 2>&1; echo "skip$s rc=$?"; grep -E "T=|us  " $OUT/kb_g2t_skip$s.txt | head -20; done

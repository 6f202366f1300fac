#!/usr/bin/env bash
# s49 call 6: GEMM2 with the fused top-k combine at prefill in n-major tile order (DeepSeek-V3 TP8: K = 256, A small)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/env.txt
timeout 150 python3 .calls/s49_fc_bits.py > $OUT/bits.txt 2>&1; echo "bits rc=$?"; grep -v -i warn $OUT/bits.txt | tail -4
V1='{"n_tiles": 1, "persistent": 0, "group_m": 4096}'
V2='{"n_tiles": 1, "persistent": 0, "group_m": 8}'
V3='{"n_tiles": 1, "persistent": 0, "group_m": 4096, "block_n": 64}'
V4='{"n_tiles": 1, "persistent": 0, "group_m": 4096, "num_warps": 4}'
for fc in 0 1000000; do
  timeout 200 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8 --weight-format fp8_channel,bf16 \
    --tokens 8192 --calls 10 --bw 3.1 --fused-combine $fc --gemm2 "$V1" --gemm2 "$V2" --gemm2 "$V3" --gemm2 "$V4" \
    > $OUT/kb_fc$fc.txt 2>&1; echo "kb fc=$fc rc=$?"
done
for fc in 0 1000000; do echo "== fused-combine $fc"; grep -E "T=8192|_gemm2_kernel|_combine_kernel" $OUT/kb_fc$fc.txt | cut -c1-150; done

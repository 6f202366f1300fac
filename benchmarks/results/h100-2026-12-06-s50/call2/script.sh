#!/usr/bin/env bash
# s50 call 2 (H100): the 16-bit skip test; per-kernel DeepSeek-V3 BF16 8192 with / without the 16-bit skip; FP4 decode kernels
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; git rev-parse HEAD >> $OUT/env.txt
timeout 120 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 100 tests/test_ws_gemm.py \
  -k "skip_padding" > $OUT/t_skip.txt 2>&1; echo "tests rc=$?"; tail -3 $OUT/t_skip.txt
for s in 0 1; do FUSEDMOE_WS_SKIP16=$s timeout 100 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3 \
  --weight-format bf16 --tokens 8192 --calls 4 --bw 3.1 > $OUT/kb_bf16_skip$s.txt 2>&1; echo "kb skip$s rc=$?"
  grep -E "T=|us  " $OUT/kb_bf16_skip$s.txt | head -12; done
timeout 150 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 1,8 --calls 20 --bw 3.1 > $OUT/kb_fp4.txt 2>&1; echo "kb_fp4 rc=$?"
grep -E "T=" $OUT/kb_fp4.txt

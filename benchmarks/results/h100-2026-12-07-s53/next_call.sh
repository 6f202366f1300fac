#!/usr/bin/env bash
# Planned in the fifty-third session: the next session's first call (carry .peers). On an H200: issue 3's full
# harness (none on an H200 for fifteen sessions) and the one-token FP4 layers with this session's defaults (static
# block bound, 4-step ring). On either: the tuned table's one-token FP4 decode entries (8 stages) against 4 stages at
# the layer, then the decode GPU tests under the new defaults.
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
if [[ "$name" == *H200* ]]; then
  bash benchmarks/results/h100-2026-12-06-s46/call1/harness_branch.sh
fi
timeout 120 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --settings default,nows4mstatic,ws4st8 --rounds 3 --budget-s 0.2 > $OUT/ab_defaults.txt 2>&1
timeout 120 python3 benchmarks/decode_ab.py --preset deepseek-v3-tp8,qwen3-30b-a3b,nemotron-nano --weight-format bf16,fp8_tensor \
  --tokens 1,8 --settings default,efirst --rounds 2 --budget-s 0.2 > $OUT/ab_efirst.txt 2>&1; tail -13 $OUT/ab_efirst.txt
echo "ab rc=$?"; tail -7 $OUT/ab_defaults.txt
# the table's entries at 4 stages (GEMM1 / GEMM2 overlays of the chosen config; both GEMMs' time under the profiler)
timeout 120 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --calls 30 --bw 3.1 --gemm1 '{"num_stages": 4}' --gemm2 '{"num_stages": 4}' > $OUT/kb_st4.txt 2>&1
echo "kb rc=$?"; grep -E "T=1 |_ws_fp4_dec" $OUT/kb_st4.txt
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 140 tests/test_ws_fp4_dec.py \
  > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -3 $OUT/t_fp4_dec.txt

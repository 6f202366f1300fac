#!/usr/bin/env bash
# Planned in the fiftieth session, not run (no machine could be started for it): the next session's first call.
# (1) 16-bit weights' skipped padding half WITH tiles from the global counter -- is the skip's loss at DeepSeek-V3
# BF16 8192 (0.761x, all in GEMM1) static tiles drifting apart? (wsdyn = counted tiles, which for gated layers also
# turns the row copies on); (2) the correctness of that pairing; (3) the decode align launch with the dot-order copy
# in column tiles (commit 4107326): `_align_scatter_quant_kernel` at one token was 3.69 / 3.61 us (gpt-oss-120b /
# Nemotron-3-Nano MXFP4) and 1.87 us (Nemotron-3-Super) in s50 call 2 on an H100.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; git rev-parse HEAD >> $OUT/env.txt
timeout 170 python3 -u benchmarks/decode_ab.py --preset deepseek-v3,deepseek-v3-tp8,qwen3-30b-a3b \
  --weight-format bf16 --tokens 8192 --settings default,wsdyn,wsdyn+ws16skip \
  --rounds 2 > $OUT/ab_skipdyn.txt 2>&1
echo "ab rc=$?"; grep -vE "^\s*$" $OUT/ab_skipdyn.txt | tail -5
FUSEDMOE_WS_DYN=1 FUSEDMOE_WS_SKIP16=1 timeout 140 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider \
  --timeout 150 tests/test_ws_gemm.py -k "bf16 or BF16 or skip_padding" > $OUT/t_16bit_dyn_skip.txt 2>&1; echo "t rc=$?"
tail -3 $OUT/t_16bit_dyn_skip.txt
timeout 120 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 1 --calls 20 --bw 3.1 > $OUT/kb_fp4_t1.txt 2>&1; echo "kb rc=$?"
grep -E "T=|_align" $OUT/kb_fp4_t1.txt
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 2 -p no:cacheprovider --timeout 140 tests/test_ws_fp4_dec.py \
  > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -3 $OUT/t_fp4_dec.txt

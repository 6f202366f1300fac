#!/usr/bin/env bash
# s53 call 1 (carry .peers .calls), cut to the device time left: the static block bound's GPU tests and A/B, and the
# one-token FP4 GEMMs at 4 programs an SM with split-K (gpt-oss-120b only).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 100 python3 -m pytest -q -rfE --tb=short -m gpu -p no:cacheprovider --timeout 90 tests/test_ws_fp4_dec.py \
  -k "early_weights_same_bits" > $OUT/t_fp4_dec.txt 2>&1; echo "t_fp4_dec rc=$?"; tail -3 $OUT/t_fp4_dec.txt
timeout 120 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --settings default,ws4mstatic --rounds 2 --budget-s 0.25 > $OUT/ab_mstatic.txt 2>&1; echo "ab rc=$?"
tail -8 $OUT/ab_mstatic.txt
timeout 70 python3 benchmarks/kernel_breakdown.py --preset gpt-oss-120b --weight-format mxfp4 --tokens 1 --calls 20 \
  --bw 3.1 --gemm1 '{"persistent": 4, "num_stages": 6, "split_k": 2}' --gemm2 '{"persistent": 4, "num_stages": 6, "split_k": 4}' \
  > $OUT/kb_fp4_t1.txt 2>&1; echo "kb rc=$?"
grep -E "T=1 |_ws_fp4_dec" $OUT/kb_fp4_t1.txt | head -20

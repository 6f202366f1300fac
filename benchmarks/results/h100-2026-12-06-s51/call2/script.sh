#!/usr/bin/env bash
# s51 call 2 (warm after call 1): GEMM1's L2 prefetch of GEMM2's weights alone at one token; the merged 16-bit skip
# same-bits test; the 16-bit warp-specialized GPU tests with counted tiles + skip forced (call 1's ran out of time)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt; git rev-parse HEAD >> $OUT/env.txt
timeout 100 python3 -u benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-nano --weight-format mxfp4,nvfp4 \
  --tokens 1 --settings default,ws4pfn --rounds 3 --budget-s 0.3 > $OUT/ab_pfn.txt 2>&1; echo "ab_pfn rc=$?"
tail -5 $OUT/ab_pfn.txt
timeout 120 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 110 tests/test_ws_gemm.py \
  -k skip_padding > $OUT/t_skip.txt 2>&1; echo "t_skip rc=$?"; tail -3 $OUT/t_skip.txt
FUSEDMOE_WS_DYN=1 FUSEDMOE_WS_SKIP16=1 timeout 300 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider \
  --timeout 250 tests/test_ws_gemm.py -k "bf16 or BF16" > $OUT/t_16bit_dyn_skip.txt 2>&1; echo "t16 rc=$?"
tail -3 $OUT/t_16bit_dyn_skip.txt

#!/usr/bin/env bash
# session 15, call 6 (short): the final code's DeepSeek-V3 BF16 prefill (16-bit weights no longer skip), then the BF16 ws tests
set -uo pipefail
export PYTHONPATH="$PWD/src" PYTHONUNBUFFERED=1
(cd .peers && timeout 60 python3 run_peers.py --peers sglang,fusedmoe --plugin ../benchmarks/harness_plugin.py --models dsv3 \
   --dtypes bf16 --tokens 2048 8192 --jobs 0 --budget-s 50 --no-ceilings --out $OUT/ab) 2>&1 | grep -E "^ +M=" | tee $OUT/dsv3_bf16.txt
timeout 80 python3 -m pytest -q -rfE --tb=short -m gpu -n 3 -p no:cacheprovider --timeout 70 tests/test_ws_gemm.py -k "bf16" \
  2>&1 | grep -v "warner\|Warning" | tail -4 | tee $OUT/ws_bf16_tests.txt

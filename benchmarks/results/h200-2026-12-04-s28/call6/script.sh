#!/usr/bin/env bash
# s28 call 6: the FP4 warp-specialized prefill GEMMs in the layer (kernels/_ws_fp4.py): their GPU tests, the FP4
# GPU test file with the new default, then in-process A/B against the Triton kernels at prefill
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s28_call6.sh "$OUT/script.sh"
timeout 150 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 140 tests/test_ws_fp4.py \
   2>&1 | tee "$OUT/gpu_ws_fp4.txt" | tail -15
timeout 200 python3 -m pytest -q -rfE --tb=line -m gpu -n 6 -p no:cacheprovider --timeout 180 tests/test_triton_fp4.py \
   2>&1 | tee "$OUT/gpu_fp4.txt" | tail -12
timeout 200 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano --weight-format mxfp4 \
   --tokens 1024,4096 --settings default,nows4,ws4bt128,ws4bt256 --rounds 2 2>&1 | tee "$OUT/prefill_ab.txt" | tail -8

#!/usr/bin/env bash
# s27 call 8: scale runs restricted to decode tiles without the dot order: the failing dot-order test again, the scale-run
# tests (now also run-to-run bits), padded rows, CUDA graphs, the layer tests
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
cp .calls/s27_call8.sh "$OUT/script.sh"
timeout 400 python3 -m pytest -q -rfE --tb=short -m gpu -n 6 -p no:cacheprovider --timeout 300 \
   tests/test_triton_fp4.py tests/test_layer_triton.py \
   -k "dot_order or scale_run or padded or cuda_graph or mx_fold or qwen3_tp8" 2>&1 | tee "$OUT/gpu_tests.txt" | tail -8

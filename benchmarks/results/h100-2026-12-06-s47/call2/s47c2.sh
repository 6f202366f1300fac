#!/usr/bin/env bash
# s47 call 2: the GPU tests of the last two sessions' built-but-unrun code
export PYTHONPATH=$PWD/src
timeout 150 python3 -m pytest -m gpu -n 2 tests/test_ws_fp4.py -k fold_same_bits_and_graph -rfE --tb=short -q > $OUT/t_fp4graph.txt 2>&1; echo "fp4 graph rc=$?"
timeout 330 python3 -m pytest -m gpu -n 4 tests/test_triton_moe.py -k "deepseek or dsv3 or real" -rfE --tb=short -q --timeout 300 > $OUT/t_dsv3.txt 2>&1; echo "dsv3 rc=$?"
tail -5 $OUT/t_fp4graph.txt; tail -8 $OUT/t_dsv3.txt

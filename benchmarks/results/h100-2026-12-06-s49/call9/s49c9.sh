#!/usr/bin/env bash
# s49 call 9: Nemotron FP8 per channel 8192's GEMM1 entry (now under the real I_pad, 1920) against the old tile;
# the tuner's confirmation step on the GPU (the two points whose 1 % entries lost in the harness, scratch table)
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | tee $OUT/env.txt
timeout 90 python3 benchmarks/kernel_breakdown.py --preset nemotron-nano --weight-format fp8_channel --tokens 8192 \
  --calls 10 --bw 3.1 --gemm1 '{"block_n": 128, "num_stages": 5}' > $OUT/kb_nem.txt 2>&1; echo "kb rc=$?"
grep -E "T=8192|_ws_gemm" $OUT/kb_nem.txt | cut -c1-200
timeout 120 python3 -m fusedmoe tune --preset mixtral-8x7b --weight-format fp8_channel --tokens 512 --max-candidates 8 \
  --out $OUT/t.json --report $OUT/rep.json --no-progress > $OUT/tune.txt 2>&1; echo "tune rc=$?"
grep -E "heuristic .* -> tuned|│ mixtr" $OUT/tune.txt | cut -c1-220
timeout 100 python3 -m pytest -m gpu tests/test_bench.py -k "tune_small" -q -rfE --tb=short -p no:cacheprovider \
  --timeout 90 > $OUT/t_tune.txt 2>&1; echo "test rc=$?"; tail -1 $OUT/t_tune.txt

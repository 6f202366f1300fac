#!/usr/bin/env bash
# s48 call 5: the H100 table's DeepSeek-V3 TP8 FP8 entries checked against the reference and timed (fusedmoe bench),
# through the harness (TP8 all formats at 2048 / 8192), the layer's GPU test file, one-token kernel breakdowns.
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee $OUT/env.txt
timeout 150 python3 -m fusedmoe bench --preset deepseek-v3-tp8 --weight-format fp8_channel,fp8_tensor,fp8_block \
  --tokens 2048,8192 --peers triton --quick-ceilings > $OUT/bench_tp8.txt 2>&1; echo "bench rc=$?"
export PEERS=sglang,fusedmoe BUDGET_S=100
export PLAN_ARGS="--models dsv3_tp8 --dtypes bf16 fp8_channel fp8_tensor fp8_block --tokens 2048 8192"
export PRECOMPILE_ARGS="--models dsv3_tp8 --dtypes bf16,fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
OUT=$OUT/h timeout 150 bash benchmarks/harness_run.sh > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
timeout 200 python3 -m pytest -m gpu -n 4 tests/test_triton_moe.py --timeout 300 -q -rfE --tb=short -p no:cacheprovider \
  > $OUT/t_moe.txt 2>&1; echo "pytest rc=$?"
timeout 60 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8,qwen3-30b-a3b --weight-format fp8_channel,fp8_tensor \
  --tokens 1 --calls 10 --bw 3.1 > $OUT/kb_t1.txt 2>&1; echo "kb1 rc=$?"
grep -E "deepseek|check|FAIL|Error" $OUT/bench_tp8.txt | head -20
tail -3 $OUT/t_moe.txt; tail -3 $OUT/h_log.txt; head -12 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h

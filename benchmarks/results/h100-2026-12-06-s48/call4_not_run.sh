#!/usr/bin/env bash
# s48 call 4: the H100 table's new DeepSeek-V3 TP8 FP8 entries (tuned 2048; the wide warp-specialized GEMM1 at 8192)
# through the harness with Nemotron FP8 (X_GATHER forced on beside), the GPU test file of the layer, and GEMM1 tiles
# for Nemotron-Nano FP8 at 8192 tokens, then the tuner's new short-K pairs at DeepSeek-V3 TP8 (FP8 2048, BF16).
export PYTHONPATH=$PWD/src
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee $OUT/env.txt
export PEERS=sglang,fusedmoe,fusedmoe-xg BUDGET_S=150
export PLAN_ARGS="--models dsv3_tp8 nemotron --dtypes fp8_channel fp8_tensor fp8_block --tokens 2048 8192"
export PRECOMPILE_ARGS="--models dsv3_tp8,nemotron --dtypes fp8_channel,fp8_tensor,fp8_block --tokens 2048,8192"
OUT=$OUT/h timeout 300 bash benchmarks/harness_run.sh > $OUT/h_log.txt 2>&1; echo "harness rc=$?"
python3 benchmarks/peer_ratio.py $OUT/h/peers.jsonl fusedmoe > $OUT/ratio.txt 2>&1
timeout 200 python3 -m pytest -m gpu -n 4 tests/test_triton_moe.py --timeout 300 -q -rfE --tb=short -p no:cacheprovider \
  > $OUT/t_moe.txt 2>&1; echo "pytest rc=$?"
timeout 200 python3 benchmarks/kernel_breakdown.py --preset nemotron-nano --weight-format fp8_channel,fp8_tensor \
  --tokens 8192 --calls 10 --bw 3.1 \
  --gemm1 '{"warp_specialized": true, "block_m": 128, "block_n": 256, "block_k": 128, "num_warps": 4, "num_stages": 3}' \
  --gemm1 '{"warp_specialized": true, "block_m": 128, "block_n": 256, "block_k": 128, "num_warps": 4, "num_stages": 4}' \
  > $OUT/kb_nem.txt 2>&1; echo "kb rc=$?"
timeout 100 python3 benchmarks/kernel_breakdown.py --preset deepseek-v3-tp8,qwen3-30b-a3b --weight-format fp8_channel,fp8_tensor \
  --tokens 1 --calls 10 --bw 3.1 > $OUT/kb_t1.txt 2>&1; echo "kb1 rc=$?"
TUNE_OUT=$PWD/src/fusedmoe/configs/triton_moe_tuned.json TUNE_MAX_CANDIDATES=8 timeout 330 bash benchmarks/device_run.sh \
  "tune:deepseek-v3-tp8:fp8_tensor,fp8_channel,fp8_block:110:2048" "tune:deepseek-v3-tp8:bf16:90:2048,8192" \
  > $OUT/tune.txt 2>&1; echo "tune rc=$?"
cp src/fusedmoe/configs/triton_moe_tuned.json $OUT/
tail -3 $OUT/t_moe.txt
grep -E "│ deepse" $OUT/tune.txt
grep -E "T=8192 |_ws_gemm" $OUT/kb_nem.txt | cut -c1-200
tail -4 $OUT/h_log.txt; tail -30 $OUT/ratio.txt
cd $OUT && tar czf h.tgz h && rm -rf h

#!/usr/bin/env bash
# s41 call 1: H200 tunes of the FP8 prefill points (DSv3 / MiniMax-M2 all FP8 formats; Mixtral / Qwen3 / Nemotron
# per tensor / channel), 2048 / 8192 tokens, merged into the shipped table
export TUNE_OUT=$PWD/src/fusedmoe/configs/triton_moe_tuned.json TUNE_MAX_CANDIDATES=8
bash benchmarks/device_run.sh "tune:deepseek-v3,minimax-m2:fp8_block,fp8_tensor,fp8_channel:${TB1:-200}:2048,8192" \
  > $OUT/c1a.log 2>&1
tail -14 $OUT/c1a.log
cp $TUNE_OUT $OUT/triton_moe_tuned.json
bash benchmarks/device_run.sh "tune:mixtral-8x7b,qwen3-30b-a3b,nemotron-nano:fp8_tensor,fp8_channel:${TB2:-150}:2048,8192" \
  > $OUT/c1b.log 2>&1
tail -14 $OUT/c1b.log
cp $TUNE_OUT $OUT/triton_moe_tuned.json
cd $OUT && tar czf t.tgz tune_list_* && rm -f tune_list_*; ls

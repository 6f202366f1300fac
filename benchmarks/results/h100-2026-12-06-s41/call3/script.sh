#!/usr/bin/env bash
# s41 call 3: FP4 decode tune (MXFP4 / NVFP4 x BF16, 1 / 2 / 4 tokens), merged into the shipped table
export TUNE_OUT=$PWD/src/fusedmoe/configs/triton_moe_tuned.json TUNE_MAX_CANDIDATES=9
bash benchmarks/device_run.sh "tune:gpt-oss-120b,nemotron-super,nemotron-nano:mxfp4,nvfp4:${TB:-240}:1,2,4" > $OUT/c3.log 2>&1
tail -22 $OUT/c3.log
cp $TUNE_OUT $OUT/triton_moe_tuned.json
cd $OUT && tar czf t.tgz tune_list_* && rm -f tune_list_*; ls

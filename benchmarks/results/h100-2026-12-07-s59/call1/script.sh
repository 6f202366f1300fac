#!/usr/bin/env bash
# s59 call 1 (~400 s): the GPU tests of the FP4 prefill kernel's three opt-ins -- S_SMEM and ONE_STORE (s58) and PAIRS
# (s59, four consumer warpgroups) -- each against the default path's bits and the reference, then the in-process A/B
# at 4096 / 2048 tokens (PAIRS only if its tests passed).
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name"
export PYTHONPATH=$PWD/src
timeout 200 python3 -m pytest -q -rfE --tb=short -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/test_ws_fp4.py \
  -k "pairs or scales_smem or one_store" > $OUT/tests.txt 2>&1
echo "tests rc=$?"; tail -4 $OUT/tests.txt
S=default,ws4ss,ws4one
if ! grep -q "FAILED.*pairs\|ERROR.*pairs\|Timeout" $OUT/tests.txt && grep -q "passed" $OUT/tests.txt; then S=$S,ws4pair; fi
echo "settings $S"
timeout 190 python3 benchmarks/decode_ab.py --preset gpt-oss-120b,nemotron-super,nemotron-nano \
  --weight-format mxfp4,nvfp4 --tokens 4096,2048 --settings $S --rounds 2 --budget-s 0.12 \
  > $OUT/ab.txt 2>&1; echo "ab rc=$?"
grep -v -i warn $OUT/ab.txt | cut -c1-160 | tail -18
